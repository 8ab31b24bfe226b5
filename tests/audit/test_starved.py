"""No starved tier passes, whatever its SLO names; a check that judges nothing says so and is no pass.

The review's three tiers: 0 % served (all abandoned, all 429) with SLOs naming only checks that judge
nothing (floor_share without saturation, a deadline-miss rate on sessions without deadlines, an abandon
rate without patience) gated green. Each test builds the smallest run that showed it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import MS, RunBuilder, S

from rushhour.audit import run_audit
from rushhour.audit.gates import EXIT_FAIL, EXIT_INVALID, EXIT_PASS, exit_code, tier_verdicts
from rushhour.audit.judged import JUDGED_CHECK, MIN_SERVED_CHECK, not_judged_verdict, starved_verdict, tier_state
from rushhour.audit.summary import Summary, Validity, Verdict
from rushhour.scenarios.model import SLO

GOLD: dict[str, Any] = {"name": "gold", "priority": 10, "slo": {"max_drop_rate": 0.5}}
GOLD_WHO: dict[str, Any] = {"tier": "gold", "tenant": "g", "persona": "chat-gold"}
LOW_WHO: dict[str, Any] = {"tier": "low", "tenant": "l", "persona": "chat-low"}
NO_ANSWER: dict[str, Any] = {"status": 0, "complete": False, "headers_ns": None, "first_token_ns": None,
                             "last_token_ns": None, "tokens": 0, "output_tokens": None}


def _run(tmp_path: Path, low_slo: dict[str, Any], fill: str, *, n: int = 30) -> Summary:
    """gold served throughout; the ``low`` tier's n requests all ``fill``: abandoned, 429, or served."""
    b = RunBuilder(tmp_path, tiers=[GOLD, {"name": "low", "priority": -1, "slo": low_slo}], duration_s=60)
    for i in range(n):
        b.request(sent_ns=i * S + 1, **GOLD_WHO)
        at = i * S + 2
        if fill == "abandoned":
            b.request(sent_ns=at, abandoned=True, client_timeout=True, done_ns=at + 500 * MS,
                      error="abandoned: no first token within the user's patience (0.5 s)", **NO_ANSWER, **LOW_WHO)
        elif fill == "429":  # a rate limit: turned away, but no saturation window (no capacity signal)
            b.dropped(status=429, reason="rate_limit_exceeded", error="rate limit", sent_ns=at, **LOW_WHO)
        else:
            b.request(sent_ns=at, **LOW_WHO)
        b.task(task_id=f"s{i}", session_id=f"s{i}", persona="chat-low", tier="low", tenant="l", start_ns=at,
               end_ns=at + S, outcome="completed" if fill == "served" else "failed")
    return run_audit(b.close())


def _checks(s: Summary, tier: str = "low") -> dict[str, Verdict]:
    return {v.check: v for v in s.verdicts if v.tier == tier}


# ---- the review's three starved tiers: FAIL, not PASS

@pytest.mark.parametrize(("fill", "slo"), [
    ("abandoned", {"floor_share": 0.1}),
    ("429", {"max_deadline_miss_rate": 0.1}),
    ("429", {"max_abandon_rate": 0.1}),
])
def test_a_starved_tier_fails_whatever_its_slo_names(tmp_path: Path, fill: str, slo: dict[str, Any]) -> None:
    s = _run(tmp_path, slo, fill)
    low = s.tier("low")
    assert low.requests == 30 and low.by_class.get("served", 0) == 0
    checks = _checks(s)
    starved = checks[MIN_SERVED_CHECK]
    assert not starved.passed and not starved.inconclusive and not starved.vacuous
    assert "starved: none of its 30 sent request(s) was served" in starved.message
    assert (starved.threshold, starved.observed) == (1.0, 0.0)
    vacuous = [v for v in checks.values() if v.vacuous]  # the SLO's own check judged nothing, and says so
    assert vacuous and all("vacuous: " in v.message and not v.passed for v in vacuous)
    assert JUDGED_CHECK not in checks  # starved is a judgement: FAIL, not NOT JUDGED
    assert tier_state(s.verdicts, "low").state == "fail"
    assert s.exit_code == EXIT_FAIL and not s.passed


def test_vacuous_lines_name_why(tmp_path: Path) -> None:
    s = _run(tmp_path, {"floor_share": 0.1, "max_deadline_miss_rate": 0.1, "max_abandon_rate": 0.1}, "429")
    messages = {c: v.message for c, v in _checks(s).items() if v.vacuous}
    assert messages == {
        "floor_share": "low floor_share: vacuous: no saturation window",
        "sessions.max_deadline_miss_rate": "low sessions.max_deadline_miss_rate: vacuous: none of its 30 sessions "
                                           "had a deadline",
        "persona.chat-low.max_abandon_rate": "low persona.chat-low.max_abandon_rate: vacuous: no patience set (its "
                                             "users never give up)",
    }


# ---- served, but only vacuous checks: NOT JUDGED (exit 2), unless allowed

def test_only_vacuous_checks_is_not_judged(tmp_path: Path) -> None:
    s = _run(tmp_path, {"floor_share": 0.1, "max_abandon_rate": 0.1}, "served")
    checks = _checks(s)
    assert MIN_SERVED_CHECK not in checks  # served: the implicit minimum is met and not shown
    marker = checks[JUDGED_CHECK]
    assert marker.inconclusive and not marker.passed and not marker.vacuous
    assert marker.message == ("low judged: NOT JUDGED: every check was vacuous (persona.chat-low.max_abandon_rate: "
                              "no patience set (its users never give up); floor_share: no saturation window)")
    state = tier_state(s.verdicts, "low")
    assert (state.state, state.checks, state.vacuous, state.allowed) == ("not_judged", 0, 2, False)
    assert tier_state(s.verdicts, "gold").state == "pass"
    assert s.exit_code == EXIT_INVALID and not s.passed


def test_allow_not_judged_lets_the_gate_pass_and_still_says_so(tmp_path: Path) -> None:
    s = _run(tmp_path, {"floor_share": 0.1, "allow_not_judged": True}, "served")
    marker = _checks(s)[JUDGED_CHECK]
    assert marker.vacuous and not marker.inconclusive and not marker.passed
    assert marker.message.endswith("(allowed by allow_not_judged)")
    state = tier_state(s.verdicts, "low")
    assert state.state == "not_judged" and state.allowed
    assert s.exit_code == EXIT_PASS and s.passed  # gold's check judged and passed


def test_allowance_never_lets_a_starved_tier_pass(tmp_path: Path) -> None:
    s = _run(tmp_path, {"floor_share": 0.1, "allow_not_judged": True}, "429")
    assert not _checks(s)[MIN_SERVED_CHECK].passed and s.exit_code == EXIT_FAIL


def test_one_judged_check_beside_vacuous_ones_is_a_pass(tmp_path: Path) -> None:
    s = _run(tmp_path, {"floor_share": 0.1, "max_drop_rate": 0.1}, "served")
    state = tier_state(s.verdicts, "low")
    assert (state.state, state.checks, state.vacuous) == ("pass", 1, 1)
    assert s.exit_code == EXIT_PASS


def test_min_served_set_by_the_slo_is_judged_and_shown(tmp_path: Path) -> None:
    s = _run(tmp_path, {"min_served": 31}, "served")
    v = _checks(s)[MIN_SERVED_CHECK]
    assert not v.passed and v.message == "low min_served: starved: 30 of 30 sent request(s) served, needs ≥ 31"
    s = _run(tmp_path / "b", {"min_served": 30}, "served")
    assert _checks(s)[MIN_SERVED_CHECK].passed and s.exit_code == EXIT_PASS


def test_a_tier_without_slo_gets_no_starved_check(tmp_path: Path) -> None:
    s = _run(tmp_path, {}, "429")
    assert not _checks(s) and s.exit_code == EXIT_PASS  # gold passes; low promised nothing


# ---- the pure pieces

def _v(check: str, *, passed: bool = True, inconclusive: bool = False, vacuous: bool = False,
       tier: str = "t") -> Verdict:
    return Verdict(tier=tier, check=check, threshold=1.0, observed=None, bound=None, judge="point", passed=passed,
                   inconclusive=inconclusive, vacuous=vacuous, message=f"{tier} {check}: why")


VALID = Validity(valid=True, reasons=[], loop_lag_p99_ms=None, cpu_max_percent=None, not_sent=0,
                 schedule_lag_p99_ms=None, skipped_lines=0, truncated_shards=0)


def test_exit_code_leaves_vacuous_checks_out() -> None:
    vac = _v("floor_share", passed=False, vacuous=True)
    assert exit_code(VALID, [vac]) == (False, EXIT_INVALID)  # only vacuous: nothing was judged
    assert exit_code(VALID, [vac, _v("max_drop_rate")]) == (True, EXIT_PASS)
    assert exit_code(VALID, [vac, _v("max_drop_rate", passed=False)]) == (False, EXIT_FAIL)


def test_not_judged_verdict_only_when_every_check_is_vacuous() -> None:
    vac = _v("floor_share", passed=False, vacuous=True)
    assert not_judged_verdict("t", [vac, _v("max_drop_rate")], SLO(floor_share=0.1), "point") is None
    assert not_judged_verdict("t", [], SLO(floor_share=0.1), "point") is None
    marker = not_judged_verdict("t", [vac, _v("x", tier="u")], SLO(floor_share=0.1), "point")
    assert marker is not None and marker.inconclusive and marker.message == (
        "t judged: NOT JUDGED: every check was vacuous (floor_share: why)")
    assert exit_code(VALID, [vac, _v("max_drop_rate", tier="u"), marker]) == (False, EXIT_INVALID)


@pytest.mark.parametrize(("verdicts", "state"), [
    ([], "none"),
    ([_v("a"), _v("b", passed=False, vacuous=True)], "pass"),
    ([_v("a", passed=False, inconclusive=True), _v("b")], "inconclusive"),
    ([_v("a", passed=False), _v(JUDGED_CHECK, passed=False, inconclusive=True)], "fail"),
    ([_v("a", passed=False, vacuous=True), _v(JUDGED_CHECK, passed=False, inconclusive=True)], "not_judged"),
    ([_v("a", passed=False, vacuous=True)], "not_judged"),
])
def test_tier_state(verdicts: list[Verdict], state: str) -> None:
    assert tier_state(verdicts, "t").state == state


def test_vacuous_without_any_persona_or_session() -> None:
    """A tier with no persona's requests and no task lines: both checks judge nothing, and say why."""
    from rushhour.audit.summary import TierSummary

    tier = TierSummary.model_construct(name="t", personas=[], tasks=None, sessions=None)
    verdicts = {v.check: v for v in tier_verdicts(tier, SLO(max_abandon_rate=0.1, max_deadline_miss_rate=0.1), None)}
    assert verdicts["max_abandon_rate"].message == "t max_abandon_rate: vacuous: no requests from any persona"
    assert verdicts["max_deadline_miss_rate"].message == ("t max_deadline_miss_rate: vacuous: no agent tasks or "
                                                          "chat sessions")
    assert all(v.vacuous and not v.passed for v in verdicts.values())


def test_starved_verdict_needs_an_slo_and_a_request() -> None:
    from rushhour.audit.summary import Rate, TierSummary

    tier = TierSummary.model_construct(name="t", drop_rate=Rate(k=5, n=5, value=1.0, low=None, high=None))
    assert starved_verdict(tier, SLO(), "point") is None
    v = starved_verdict(tier, SLO(floor_share=0.1), "point")
    assert v is not None and not v.passed and v.check == MIN_SERVED_CHECK
    empty = TierSummary.model_construct(name="t", drop_rate=Rate(k=0, n=0, value=None, low=None, high=None))
    assert starved_verdict(empty, SLO(floor_share=0.1), "point") is None  # no demand: nothing starved
    assert starved_verdict(empty, SLO(min_served=1), "point") is not None  # named: judged on no requests too


def test_users_who_did_give_up_are_judged_without_a_named_patience(tmp_path: Path) -> None:
    """No patience in the scenario, but the records say users abandoned: the abandon rate judges that."""
    s = _run(tmp_path, {"max_abandon_rate": 0.1}, "abandoned")
    v = _checks(s)["persona.chat-low.max_abandon_rate"]
    assert not v.vacuous and not v.passed and v.observed == 1.0
