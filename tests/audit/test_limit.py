"""The find-limit controller (audit/limit.py) on a made-up stack whose TTFT grows with the load, and its channel."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rushhour.audit.limit import LimitController, limit_sentence
from rushhour.loadgen import livescale
from rushhour.scenarios.model import Scenario

NS = 1_000_000_000


def scenario(**limit: Any) -> Scenario:
    return Scenario.model_validate({
        "name": "limit", "target": {"url": "testbed"},
        "tiers": [{"name": "interactive", "slo": {"ttft_ms": {"p90": 1000}, "max_drop_rate": 0.05}},
                  {"name": "batch"}],
        "personas": [{"kind": "chat", "name": "chat", "tier": "interactive", "arrival": {"rate": 10}},
                     {"kind": "chat", "name": "bulk", "tier": "batch", "arrival": {"rate": 2}}],
        "phases": [{"name": "peak", "duration": 400}],
        "find_limit": {"start": 1, "factor": 2, "max_scale": 16, "step_s": 5, "settle_s": 2, "lag_s": 2,
                       "bisect": 3, "hold_s": 30, **limit}})


def record(t_s: float, ttft_ms: float, status: int = 200) -> dict[str, Any]:
    sent = int(t_s * NS)
    return {"kind": "request", "tier": "interactive", "intended_ns": sent, "sent_ns": sent, "status": status,
            "complete": status == 200, "first_token_ns": sent + int(ttft_ms * 1e6),
            "done_ns": sent + int(ttft_ms * 1e6) + 1000, "attempt": 1, "route": "primary"}


def drive(ctl: LimitController, ttft_at: Any, cap_s: int = 400) -> list[tuple[float, float]]:
    """A stack answering at once, its TTFT ttft_at(scale, i); returns the (time, scale) changes."""
    scale = ctl.start(0.0)
    changes = [(0.0, scale)]
    for t in range(cap_s):
        n = round(10 * scale)
        for i in range(n):
            ctl.feed(record(t + i / n, ttft_at(scale, i)))
        changed = ctl.look(t + 1.0)
        if changed is not None:
            scale = changed
            changes.append((t + 1.0, scale))
        if ctl.done:
            break
    return changes


def test_ramp_bisect_hold_bracket_the_limit() -> None:
    ctl = LimitController(scenario())
    # TTFT = 100 ms × scale² (± spread): its p90 crosses 1,000 ms near scale √10 ≈ 3.16
    changes = drive(ctl, lambda s, i: 100 * s * s * (0.9 + 0.02 * (i % 10)))
    found = ctl.result()
    assert found["status"] == "within" and ctl.done
    assert found["low_scale"] < math.sqrt(10 / 1.08) < found["high_scale"] <= 4.0
    assert found["binding"] == {"tier": "interactive", "check": "ttft_ms.p90"}
    kinds = [s["kind"] for s in found["steps"]]
    assert kinds[:3] == ["ramp", "ramp", "ramp"] and "bisect" in kinds and kinds[-1] == "hold"
    assert [round(s, 3) for _, s in changes[:3]] == [1.0, 2.0, 4.0]
    assert found["hold"]["scale"] == round(found["low_scale"], 6) and found["hold"]["check"]["n"] >= 20
    assert found["tiers"]["interactive"]["low_rps"] == round(found["low_scale"] * 12, 4)  # both personas' rates
    assert "interactive binds first on ttft_ms.p90" in limit_sentence(found)


def test_a_search_the_runs_end_cut_short_is_not_called_the_limit() -> None:
    found = {"status": "cap", "low_scale": 8.0, "high_scale": 11.3, "base_rps": 2.0, "steps": [{}] * 6,
             "binding": {"tier": "interactive", "check": "max_drop_rate"}}
    line = limit_sentence(found)
    assert line.startswith("not confirmed") and "highest sustainable" not in line and "11.3× (22.6/s) failed" in line
    assert limit_sentence({**found, "status": "within"}).startswith("highest sustainable load 8× (16/s)")


def test_requests_sent_while_settling_count_in_no_step() -> None:
    ctl = LimitController(scenario())
    ctl.start(0.0)
    ctl.feed(record(1.0, 50))  # in the first 2 s of settling: no step's
    ctl.feed(record(3.0, 50))  # in the window [2, 7)
    ctl.feed(record(8.0, 50))  # after the window, while it drains (lag): no step's either
    assert ctl.steps[0].sent == 1


def test_a_first_step_that_fails_says_the_limit_is_below_the_range() -> None:
    ctl = LimitController(scenario())
    drive(ctl, lambda s, i: 5000.0)
    found = ctl.result()
    assert found["status"] == "below_range" and found["low_scale"] is None and found["high_scale"] == 1.0
    assert "below the first level" in limit_sentence(found)


def test_a_thin_step_is_extended_then_never_a_pass() -> None:
    ctl = LimitController(scenario(min_samples=10_000))
    drive(ctl, lambda s, i: 10.0)
    found = ctl.result()
    assert found["steps"][0]["outcome"] == "thin" and found["low_scale"] is None  # fail closed
    assert found["steps"][0]["window_s"][1] - found["steps"][0]["window_s"][0] > 5  # extended first


def test_the_scale_file_is_read_back_and_hostile_content_keeps_the_last_good_scale(tmp_path: Path) -> None:
    clock = [0.0]
    live = livescale.LiveScale(tmp_path, clock=lambda: clock[0])
    assert live.of("chat") == 1.0  # no file yet
    livescale.write_scale(tmp_path, 2.5, "chat", 1)
    clock[0] += 1
    assert live.of("chat") == 2.5 and live.of("bulk") == 1.0
    livescale.scale_path(tmp_path).write_text('{"scale": 1e309, "persona": null}')
    clock[0] += 1
    assert live.of("chat") == 2.5
    for bad in (b"[]", b"x" * 5000, b'{"scale": -1}', b'{"scale": true}', b'{"scale": 2, "persona": 3}'):
        assert livescale.parse_scale(bad) is None


def test_a_malformed_answer_renders_as_dashes_never_a_traceback() -> None:
    from rushhour.reports import limit as shown

    for bad in ({}, {"tiers": [1], "hold": "x", "steps": "y"}, {"steps": [{"window_s": "z", "scale": "w"}, 3],
                                                                  "tiers": {"a": {"reached": True}}, "status": 5}):
        assert shown.lines(bad) and isinstance(shown.step_rows(bad), list)
    assert shown.step_rows({"steps": [{"window_s": "z", "scale": "w"}]})[0][2] == "-"


def test_output_tokens_per_second_count_served_attempts_only() -> None:
    import pandas as pd

    from rushhour.audit.build import _tokens_per_s

    attempts = pd.DataFrame({"cls": ["served", "served", "queue_full", "served"],
                             "output_tokens": [100.0, 50.0, 999.0, float("nan")]})
    assert _tokens_per_s(attempts, 10.0) == 15.0  # (100 + 50) / 10 s: the refused attempt's count is not output
    assert _tokens_per_s(attempts.iloc[2:3], 10.0) is None and _tokens_per_s(attempts, 0.0) is None


def test_a_run_that_cannot_follow_the_controller_is_refused_in_one_line() -> None:
    import pytest

    from rushhour.audit.limit import LimitController as Controller
    from rushhour.loadgen.prepare import RunOptions, check_find_limit
    from rushhour.scenarios import ScenarioError

    sc = scenario()
    with pytest.raises(ScenarioError, match="cannot run the find-limit controller"):
        check_find_limit(sc, RunOptions(), "s.yaml")  # no controller: never a silent ordinary run
    with pytest.raises(ScenarioError, match="remote workers cannot follow"):
        check_find_limit(sc, RunOptions(limit=Controller, expect_workers=2), "s.yaml")
    closed = sc.model_copy(update={"personas": [sc.personas[0].model_copy(update={"concurrency": 4}),
                                                sc.personas[1]]})
    with pytest.raises(ScenarioError, match="chat have no open-loop arrival rate"):
        check_find_limit(closed, RunOptions(limit=Controller), "s.yaml")
    check_find_limit(sc, RunOptions(limit=Controller), "s.yaml")  # open-loop chat, local processes: fine
    with pytest.raises(ValueError, match="unknown persona 'chta'"):
        scenario(persona="chta")


def test_a_level_failing_surely_is_decided_before_its_window_ends_and_a_pass_never_is() -> None:
    ctl = LimitController(scenario())
    drive(ctl, lambda s, i: 20.0 if s < 3 else 5000.0)
    found = ctl.result()
    first, four = found["steps"][0], next(s for s in found["steps"] if s["scale"] == 4.0)
    assert not first["early"] and first["window_s"] == [2.0, 7.0] and first["ahead"] is True  # the whole window
    # every answer over the limit: decided on the answers sent 2 s before, its window closed there (not 5 s long)
    assert four["early"] and four["outcome"] == "fail" and four["window_s"][1] - four["window_s"][0] < 5
    assert found["status"] == "within" and found["low_scale"] < 3 < found["high_scale"]


def test_a_pass_taken_ahead_of_its_late_answers_is_confirmed_or_undone() -> None:
    ctl = LimitController(scenario())
    ctl.start(0.0)
    for i in range(30):  # the window is [2, 7): its first 3 s answer fast
        ctl.feed(record(2.0 + i * 0.1, 50))
    assert ctl.look(7.0) == 2.0  # at the window's end the answers in by then pass: the next level starts at once
    for i in range(30):  # then the window's last requests come back slow: the pass was not borne out
        ctl.feed(record(5.0 + i * 0.06, 5000))
    assert ctl.look(9.0) is None and ctl.done  # its lag over: judged on all its requests, it fails
    found = ctl.result()
    assert found["steps"][0]["ahead"] is False and found["steps"][0]["outcome"] == "fail"
    assert found["steps"][1]["abandoned"] and found["status"] == "below_range" and found["low_scale"] is None


def test_a_failure_the_next_levels_load_could_explain_is_measured_again() -> None:
    ctl = LimitController(scenario())
    ctl.start(0.0)
    for i in range(40):
        ctl.feed(record(2.0 + i * 0.1, 50))  # [2, 6): fast
    assert ctl.look(7.0) == 2.0
    for i in range(10):  # sent in [6.5, 7), answered only after the change to 2×: slow, but at best 500 ms or less
        ctl.feed(record(6.5 + i * 0.05, 5000))
    assert ctl.look(9.0) == 1.0 and not ctl.done  # not a failure of 1× for sure: 1× again, held until judged
    found = ctl.result()
    assert [s["outcome"] for s in found["steps"]][:2] == ["unsure", "thin"] and found["steps"][1]["abandoned"]
    assert found["steps"][2]["scale"] == 1.0 and found["high_scale"] is None  # an unsure step bounds nothing


def test_a_drop_share_surely_under_its_limit_needs_fewer_requests_a_percentile_never() -> None:
    from rushhour.audit.early import TierSoFar
    from rushhour.audit.limit import share_known
    from rushhour.scenarios.model import SLO

    share = SLO(max_drop_rate=0.5)
    assert share_known(share, TierSoFar(served=7)) and not share_known(share, TierSoFar(served=4))
    assert not share_known(share, TierSoFar(served=4, unserved=3))  # 3 of 7: its bound reaches over 50 %
    assert not share_known(SLO(max_drop_rate=0.5, ttft_ms={"p90": 1000}), TierSoFar(served=9, ttft_ms=[1.0] * 9))


def test_the_steps_table_says_how_each_live_decision_came() -> None:
    from rushhour.reports import limit as shown

    steps = [{"live": "fail", "early": True}, {"live": "pass", "ahead": True}, {"live": "unsure", "ahead": False},
             {"live": "thin", "abandoned": True}, {"live": "pass"}]
    assert [row[5] for row in shown.step_rows({"steps": steps})] == [
        "fail (early)", "pass (ahead)", "unsure (ahead, not borne out)", "thin (abandoned)", "pass"]


def test_a_pass_ahead_into_a_hold_on_its_own_level_censors_nothing() -> None:
    ctl = LimitController(scenario(max_scale=1))  # nothing above 1×: the pass at 1× is held, the load unchanged
    ctl.start(0.0)
    for i in range(40):
        ctl.feed(record(2.0 + i * 0.1, 50))
    assert ctl.look(7.0) == 1.0 and ctl.steps[-1].kind == "hold"
    for i in range(10):  # slow answers of 1×'s own load: no other level to blame them on
        ctl.feed(record(6.5 + i * 0.05, 5000))
    ctl.look(9.0)
    assert ctl.result()["steps"][0]["outcome"] == "fail" and ctl.status == "below_range"


# ---- a prior bracket (--find-limit-from): the search starts around the limit ---------------------------------
def quadratic(s: float, i: int) -> float:
    """TTFT = 100 ms × scale² (± spread): its p90 crosses 1,000 ms near scale √10 ≈ 3.16."""
    return 100 * s * s * (0.9 + 0.02 * (i % 10))


def test_a_prior_bracket_around_the_limit_tries_its_ends_and_takes_fewer_steps() -> None:
    plain = LimitController(scenario())
    drive(plain, quadratic)
    ctl = LimitController(scenario(), prior={"low": 3.0, "high": 3.5})
    changes = drive(ctl, quadratic)
    found = ctl.result()
    assert [round(s, 3) for _, s in changes[:2]] == [3.0, 3.5]  # its low, then its high
    assert found["status"] == "within" and found["low_scale"] < math.sqrt(10 / 1.08) < found["high_scale"] <= 3.5
    # bisected only down to the width the plain search's ramp and bisections reach (2^(1/8)), then held
    assert found["high_scale"] / found["low_scale"] <= 2 ** (1 / 8) + 1e-9 and found["steps"][-1]["kind"] == "hold"
    assert len(found["steps"]) < len(plain.result()["steps"]) and found["prior"]["low"] == 3.0


def test_a_prior_above_the_limit_steps_down_until_it_brackets_it() -> None:
    ctl = LimitController(scenario(), prior={"low": 5.0, "high": 6.0})
    changes = drive(ctl, quadratic)
    found = ctl.result()
    scales = [round(s, 3) for _, s in changes]
    assert scales[0] == 5.0 and scales[1] == round(5 / 1.2, 3)  # down by the prior's own width first
    assert found["status"] == "within" and found["low_scale"] < math.sqrt(10 / 1.08) < found["high_scale"]
    assert found["high_scale"] / found["low_scale"] <= 2 ** (1 / 8) + 1e-9


def test_a_prior_below_the_limit_climbs_in_growing_strides() -> None:
    ctl = LimitController(scenario(), prior={"low": 1.0, "high": 1.2})
    changes = drive(ctl, quadratic)
    found = ctl.result()
    scales = [round(s, 3) for _, s in changes]
    assert scales[:4] == [1.0, 1.2, 1.44, round(1.44 * 1.44, 3)]  # the stride squared while every step passes
    assert found["status"] == "within" and found["low_scale"] < math.sqrt(10 / 1.08) < found["high_scale"]


def test_a_prior_without_a_pass_anywhere_is_below_the_range_only_at_the_floor() -> None:
    ctl = LimitController(scenario(hold_s=0), prior={"low": 0.01})
    drive(ctl, lambda s, i: 5000.0)
    found = ctl.result()
    assert found["status"] == "below_range" and all(s["outcome"] != "pass" for s in found["steps"])
    assert min(s["scale"] for s in found["steps"]) / 2 < 1e-3  # stepped down to the floor, and no further


def test_a_prior_of_other_rates_is_converted_and_another_personas_is_refused() -> None:
    # measured where the mix offered 6/s at scale 1: here it offers 12/s, so 6× there is 3× here
    ctl = LimitController(scenario(), prior={"low": 6.0, "high": 7.0, "base_rps": 6.0})
    assert ctl.start(0.0) == 3.0 and ctl.prior == {"low": 3.0, "high": 3.5, "source": ""}
    import pytest

    with pytest.raises(ValueError, match="persona 'bulk'"):
        LimitController(scenario(), prior={"low": 1.0, "persona": "bulk"})
    with pytest.raises(ValueError, match=r"\[100×, –\] is not inside \(0, max_scale 16×\]"):
        LimitController(scenario(), prior={"low": 100.0})  # over max_scale; an open bracket's high reads as a dash


def test_the_prior_flag_reads_a_scale_a_bracket_or_a_run_folder(tmp_path: Path) -> None:
    import json

    import pytest

    from rushhour.limit_prior import PriorError, read_prior

    assert read_prior("3")["low"] == 3.0 and read_prior("3")["high"] is None
    assert (read_prior("3.36..3.67")["low"], read_prior("3.36..3.67")["high"]) == (3.36, 3.67)
    run = tmp_path / "sim-1"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"find_limit": {"low_scale": 3.36, "high_scale": 3.67, "base_rps": 8.0,
                                                              "persona": None, "status": "within"}}))
    assert read_prior(str(run)) == {"low": 3.36, "high": 3.67, "base_rps": 8.0, "persona": None,
                                    "source": str(run)}
    (run / "run.json").write_text(json.dumps({"find_limit": {"low_scale": None, "high_scale": 0.25}}))
    assert read_prior(str(run))["low"] == 0.25  # below its range: start at the level that failed, step down
    for bad in ("x", "3..2", "0", "-1..2", "3..inf", "2000"):
        with pytest.raises(PriorError):
            read_prior(bad)
    (run / "run.json").write_text("{}")
    with pytest.raises(PriorError, match="no find-limit answer"):
        read_prior(str(run))
    for hostile in ("[" * 100_000, "[1, 2]", "not json", '{"find_limit": [3, 4]}'):  # one line each, no traceback
        (run / "run.json").write_text(hostile)
        with pytest.raises(PriorError):
            read_prior(str(run))


def test_a_prior_whose_held_low_fails_on_its_late_requests_is_below_it_never_within() -> None:
    # the hold's cap look passes on the requests in by then; its late ones (refusals after a queue's timeout) fail it
    ctl = LimitController(scenario(hold_s=6), prior={"low": 3.0, "high": 3.5})
    scale = ctl.start(0.0)
    late: list[dict[str, Any]] = []
    for t in range(60):
        n = round(10 * scale)
        for i in range(n):
            fast = 100 * scale * scale * (0.9 + 0.02 * (i % 10))
            if ctl.steps[-1].kind == "hold" and i % 2:  # half the hold's requests refused, their records late
                late.append(record(t + i / n, 0.0, status=503))
            else:
                ctl.feed(record(t + i / n, fast))
        changed = ctl.look(t + 1.0)
        scale = changed if changed is not None else scale
        if ctl.done:
            break
    assert ctl.done and ctl.steps[-1].kind == "hold"
    assert ctl.result()["status"] == "within"  # live, on the requests in by the hold's cap
    for rec in late:  # the drain: the run's end judges every step on all its requests
        ctl.feed(rec)
    found = ctl.result()
    assert found["low_scale"] is None and found["status"] == "below_range", found["status"]


def test_a_holds_cap_waits_for_its_windows_late_requests_and_acts_on_them() -> None:
    ctl = LimitController(scenario(hold_s=6, precision=0.001), prior={"low": 3.0, "high": 3.5})  # to its cap
    scale, injected, t = ctl.start(0.0), False, 0
    while not ctl.done and t < 120:
        n = round(10 * scale)
        for i in range(n):
            ctl.feed(record(t + i / n, quadratic(scale, i)))
        hold = ctl.steps[-1]
        if hold.kind == "hold" and math.isfinite(hold.window[1]) and not injected:
            # the window closed at its cap: refusals of its requests (a queue's timeout) come in during the lag
            injected = True
            assert not ctl.done
            for i in range(300):
                ctl.feed(record(hold.window[0] + (hold.window[1] - hold.window[0]) * i / 300, 0.0, status=503))
        t += 1
        changed = ctl.look(float(t))
        scale = changed if changed is not None else scale
    kinds = [(s.kind, round(s.scale, 3), s.outcome) for s in ctl.steps]
    assert injected and ("hold", 3.0, "fail") in kinds, kinds
    # nothing measured under the prior's low: the search steps down from it, and brackets the limit there
    after = kinds[kinds.index(("hold", 3.0, "fail")) + 1]
    assert after[0] == "ramp" and after[1] < 3.0, kinds
