"""Knee detection on hand-built sweep steps."""

from __future__ import annotations

import pytest

from rushhour.audit.summary import Verdict
from rushhour.studies.knee import KneePoint, analyse_sweep, capacity_answer, find_knee, step_from_summary, tier_knee

from .helpers import summary, tier, verdicts_for


def points(statuses: str) -> list[KneePoint]:
    """'ppf' -> pass, pass, fail at scales 1, 2, 3 …"""
    kinds = {"p": "pass", "f": "fail", "n": "no_slo", "-": "no_data"}
    return [KneePoint(float(i + 1), 10.0 * (i + 1), kinds[c], True) for i, c in enumerate(statuses)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("statuses", "status", "knee", "fail", "noisy"),
    [
        ("pppff", "within", 2, 3, False),  # monotone
        ("ppfpf", "within", 1, 2, True),  # noisy: passes again after the first failure
        ("fff", "never_passes", None, 0, False),
        ("pppp", "always_passes", 3, None, False),
        ("nnn", "no_slo", None, None, False),
        ("", "no_data", None, None, False),
        ("p-pf", "within", 2, 3, False),  # a step without data is skipped
    ],
)
def test_find_knee(statuses: str, status: str, knee: int | None, fail: int | None, noisy: bool) -> None:
    core = find_knee(points(statuses))
    assert (core.status, core.knee, core.fail, core.noisy) == (status, knee, fail, noisy)


def _step(index: int, scale: float, ttft_i: float, drop_b: int, replicas: int | None = None, spread: float = 0.1):
    """Two tiers: interactive judged on TTFT p99 ≤ 3 s, batch on drops ≤ 10 %; load grows with scale."""
    n = int(100 * scale)
    inter = tier("interactive", 100, n, 0, ttft_i, spread=spread)
    batch = tier("batch", -1, n, min(drop_b, n), 500.0)
    verdicts = verdicts_for(inter, 3000.0, 0.01) + verdicts_for(batch, None, 0.10)
    return step_from_summary(summary([inter, batch], verdicts, run_id=f"s{index}"), index, scale, replicas)


def test_monotone_sweep_knees_and_sentences() -> None:
    steps = [_step(0, 0.5, 800, 0), _step(1, 1.0, 1500, 2), _step(2, 1.5, 2500, 25), _step(3, 2.0, 4200, 60)]
    inter = tier_knee(steps, "interactive")
    batch = tier_knee(steps, "batch")
    assert inter.status == "within" and inter.knee_scale == 1.5 and inter.fail_scale == 2.0
    assert inter.knee_rps == pytest.approx(30.0)  # 2 tiers x 150 requests over 10 s
    assert inter.confident_pass is False  # 2.5 s * 1.1 = 2.75 s … fine, but the drop check's Wilson high is > 1 %
    assert "interactive holds its SLO up to 30 req/s" in inter.sentence
    assert "never dropped" in inter.sentence
    assert batch.knee_scale == 1.0 and batch.fail_scale == 1.5
    assert batch.drop_onset_scale == 1.0 and batch.drop_onset_class == "queue_full"
    assert "batch starts going unserved at 20 req/s" in batch.sentence
    assert "mostly rejected (queue full)" in batch.sentence
    assert "ttft_ms.p99 4.20 s > 3.00 s" in inter.fail_checks[0]


def test_confidence_of_a_pass() -> None:
    sure = _step(0, 5.0, 1000, 0, spread=0.05)  # 500 requests, no drops: Wilson high < 1 %, TTFT CI far below 3 s
    close = _step(0, 5.0, 2900, 0, spread=0.10)  # TTFT CI 2.61 … 3.19 s crosses 3 s
    assert sure.tier("interactive").confident
    assert close.tier("interactive").status == "pass"
    assert not close.tier("interactive").confident


def test_never_and_always_passing() -> None:
    steps = [_step(0, 1.0, 5000, 50), _step(1, 2.0, 6000, 80)]
    k = tier_knee(steps, "interactive")
    assert k.status == "never_passes"
    assert "misses its SLO already at the lowest load tested" in k.sentence
    steps = [_step(0, 1.0, 100, 0), _step(1, 2.0, 200, 0)]
    k = tier_knee(steps, "batch")
    assert k.status == "always_passes" and k.knee_scale == 2.0
    assert "holds its SLO at every load tested" in k.sentence


def test_noisy_sentence() -> None:
    steps = [_step(0, 1.0, 1000, 0), _step(1, 2.0, 3500, 0), _step(2, 3.0, 2800, 0), _step(3, 4.0, 6000, 0)]
    k = tier_knee(steps, "interactive")
    assert k.noisy and k.knee_scale == 1.0 and k.passes_again_scale == 3.0
    assert "noisy" in k.sentence


def test_replicas_capacity_answer() -> None:
    steps = []
    for r, slow in ((1, 2.0), (2, 1.0), (4, 0.5)):
        for i, scale in enumerate((1.0, 2.0, 3.0)):
            steps.append(_step(i, scale, 1200 * scale * slow, int(5 * scale * slow), replicas=r))
    result = analyse_sweep(steps, sweep_id="x", scenario="demo", mode="steady", created_at="now", target_scale=2.0)
    cap = result.capacity
    assert cap is not None
    assert cap.per_replicas == {1: False, 2: True, 4: True}
    assert cap.replicas_needed == 2
    assert cap.sentence.startswith("2 replicas keep every tier within its SLO at 2× today's peak")
    assert "1 fails (interactive" in cap.sentence
    assert capacity_answer(result.knees, steps, 5.0).replicas_needed is None
    assert len(result.knees) == 6 and result.answers[-1] == cap.sentence
    again = type(result).model_validate_json(result.model_dump_json(by_alias=True))
    assert again == result


def test_study_claims_are_not_judged_where_the_policy_had_no_effect() -> None:
    """A grid where nothing queued (speedups ~1) says nothing about the speedup or cost claims."""
    from rushhour.studies.knee import StudyRow, check_claims

    rows = [StudyRow(k=k, mix="uniform", load="moderate", policy="headroom", top_e2e_p99_ms=100.0,
                     fifo_top_e2e_p99_ms=99.0, top_speedup=0.99, cpl_gain=-0.02, drop_rate=0.0) for k in (1, 2, 4)]
    claims = {c.key: c.agrees for c in check_claims(rows)[0]}
    assert claims["optimal_k"] == "inconclusive"
    assert claims["top_speedup"] == "inconclusive"
    assert claims["cost_per_latency"] == "inconclusive"


def test_never_dropped_only_when_every_step_served_everything() -> None:
    """Issue 12: a sweep said 'low is never dropped' while 52 of 95 requests were cut unfinished."""
    from rushhour.studies.knee import knee_sentence

    steps = [_step(0, 0.5, 800, 0), _step(1, 1.0, 1500, 0)]
    row = steps[1].tiers[1].model_copy(update={"drop_rate": 0.005, "unfinished": 3})
    steps[1] = steps[1].model_copy(update={"tiers": [steps[1].tiers[0], row]})
    knee = tier_knee(steps, "batch")
    assert "never dropped" not in knee.sentence
    assert "stays under 1 % not served (at most 0.50 %)" in knee.sentence
    assert "3 of its requests were still unfinished" in knee.sentence
    assert "never dropped" in knee_sentence(tier_knee(steps, "interactive"), steps)


def test_answers_from_invalid_steps_say_so_in_the_same_sentence() -> None:
    """Issue 12: '2 replicas keep every tier within its SLO…' was printed while 6 of 8 steps were invalid."""
    steps = []
    for r, slow in ((1, 2.0), (2, 1.0)):
        for i, scale in enumerate((1.0, 2.0, 3.0)):
            steps.append(_step(i, scale, 1200 * scale * slow, int(5 * scale * slow), replicas=r))
    steps[4] = steps[4].model_copy(update={"valid": False, "reasons": ["generator loop lag p99 80 ms > 50 ms"]})
    result = analyse_sweep(steps, sweep_id="x", scenario="demo", mode="steady", created_at="now", target_scale=2.0)
    assert result.capacity is not None
    assert "— but 1 of 6 steps was invalid (scales 2" in result.capacity.sentence
    knee = next(k for k in result.knees if k.replicas == 2 and k.tier == "batch")
    assert "— but 1 of 3 steps was invalid" in knee.sentence
    clean = next(k for k in result.knees if k.replicas == 1)
    assert "invalid" not in clean.sentence


def test_an_inconclusive_check_is_named_not_called_a_miss() -> None:
    from rushhour.studies.knee import check_text, judge_check

    t = tier("interactive", 100, 20, 0, 900.0)
    v = Verdict(tier="interactive", check="ttft_ms.p99", threshold=3000.0, observed=900.0, bound=None,
                judge="point", passed=False, inconclusive=True, message="")
    c = judge_check(t, v)
    assert c.inconclusive and not c.confident and not c.passed
    assert check_text(c) == "ttft_ms.p99 inconclusive (too few samples to judge)"


def test_a_check_failed_on_its_bound_names_the_bound_and_floors_read_below() -> None:
    from rushhour.studies.knee import check_text, judge_check

    t = tier("interactive", 100, 200, 0, 1960.0)
    # judged on the bound: the observed 1.96 s alone passes 2 s, so the line must not read "1.96 s > 2.00 s"
    v = Verdict(tier="interactive", check="ttft_ms.p90", threshold=2000.0, observed=1960.0, bound=2100.0,
                judge="bound", passed=False, message="")
    assert check_text(judge_check(t, v)) == "ttft_ms.p90 bound 2.10 s > 2.00 s (observed 1.96 s)"
    few = Verdict(tier="interactive", check="ttft_ms.p99", threshold=5000.0, observed=3630.0, bound=3990.0,
                  judge="bound", passed=False, message="")
    assert check_text(judge_check(t, few)) == "ttft_ms.p99 3.63 s: too few samples to bound it within 5.00 s"
    floor = Verdict(tier="batch", check="floor_share", threshold=0.05, observed=0.03, bound=None,
                    judge="point", passed=False, message="")
    assert check_text(judge_check(t, floor)) == "floor_share 3.0 % < 5.0 %"


def test_too_few_samples_everywhere_is_not_called_a_miss() -> None:
    # short steps: every step's p99 is inconclusive; fail closed (no knee), but the sentence must not say "misses"
    def thin(index: int, scale: float) -> object:
        t = tier("high", 100, 12, 0, 900.0)
        v = Verdict(tier="high", check="ttft_ms.p99", threshold=2000.0, observed=900.0, bound=None,
                    judge="point", passed=False, inconclusive=True, message="")
        return step_from_summary(summary([t], [v], run_id=f"s{index}"), index, scale, 1)

    knee = tier_knee([thin(0, 0.5), thin(1, 1.0)], "high", 1)  # type: ignore[list-item]
    assert knee.status == "never_passes" and knee.fail_unjudged and knee.knee_scale is None
    assert "misses" not in knee.sentence
    assert knee.sentence.startswith("high cannot be judged at the lowest load tested with 1 replica")
    assert "ttft_ms.p99 inconclusive (too few samples to judge)" in knee.sentence and "--step-duration" in knee.sentence
