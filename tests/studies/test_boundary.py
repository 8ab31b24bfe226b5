"""The SLO-boundary search's pure logic: probe verdicts, repeats, bisection, bracket, cliffs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rushhour.studies.boundary import (
    Boundary,
    Probe,
    SearchSettings,
    boundary,
    check_line,
    find_cliffs,
    level_verdict,
    midpoint,
    next_scale,
    probe_outcome,
)
from rushhour.studies.knee import Check, Step, TierStep


def tier_step(name: str, status: str, confident: bool, drop: float = 0.0, ttft: float = 100.0) -> TierStep:
    passed = status == "pass"
    check = Check(check="ttft_ms.p99", threshold=2000.0, observed=ttft, low=ttft * 0.9, high=ttft * 1.1,
                  passed=passed, confident=confident)
    return TierStep(tier=name, priority=0, requests=100, served=100, offered_rps=10.0, goodput_per_s=10.0,
                    goodput=1.0, drop_rate=drop, drop_low=0.0, drop_high=drop + 0.05, ttft_p99_ms=ttft,
                    ttft_p99_ci=(ttft * 0.9, ttft * 1.1), e2e_p99_ms=None, status=status,  # type: ignore[arg-type]
                    confident=confident, checks=[] if status in ("no_slo", "no_data") else [check])


def step(index: int, scale: float, tiers: list[TierStep], valid: bool = True) -> Step:
    return Step(index=index, scale=scale, replicas=None, run_dir="", run_id=f"r{index}", seed=1, duration_s=10,
                offered_rps=10.0 * scale, valid=valid, reasons=[] if valid else ["generator loop lag"], tiers=tiers)


def search(stack: Callable[[float, int], Step], settings: SearchSettings) -> tuple[list[float], Boundary]:
    """Drive the pure search against a simulated stack; returns the probed scales and the boundary."""
    probes: list[Probe] = []
    steps: list[Step] = []
    seen: list[float] = []
    while (level := next_scale(probes, settings)) is not None:
        st = stack(level, len(probes))
        probes.append(probe_outcome(st))
        steps.append(st)
        seen.append(level)
    return seen, boundary(probes, steps, settings)


def threshold_stack(limit: float, unsure: Callable[[float, int], bool] = lambda s, i: False
                    ) -> Callable[[float, int], Step]:
    def run(scale: float, index: int) -> Step:
        ok = scale < limit
        drop = 0.0 if ok else 0.3
        return step(index, scale, [tier_step("high", "pass" if ok else "fail", not unsure(scale, index), drop)])
    return run


def test_bisection_brackets_the_boundary_within_the_precision() -> None:
    settings = SearchSettings(low=0.5, high=8.0, precision=0.1, max_probes=12)
    seen, b = search(threshold_stack(2.7), settings)
    assert seen[:2] == [0.5, 8.0] and len(seen) <= 12
    assert b.status == "within" and b.pass_scale is not None and b.fail_scale is not None
    assert b.pass_scale < 2.7 <= b.fail_scale and b.resolved and b.width is not None and b.width <= 0.1
    assert b.pass_confident and b.fail_confident and not b.noisy
    assert "SLO boundary between" in b.sentence and "(confident)" in b.sentence


def test_out_of_probes_says_the_bracket_is_wider_than_asked() -> None:
    seen, b = search(threshold_stack(2.7), SearchSettings(low=0.5, high=8.0, precision=0.01, max_probes=4))
    assert len(seen) == 4 and b.status == "within" and not b.resolved
    assert "wider than the 1 % asked" in b.sentence


def test_a_straddling_level_is_repeated_then_flagged_inconclusive() -> None:
    # every probe at 2.0× straddles (not confident): probed 1 + repeats times, then judged by majority
    settings = SearchSettings(low=1.0, high=4.0, precision=1.0, max_probes=10, repeats=2)
    seen, b = search(threshold_stack(3.0, unsure=lambda s, i: s == 2.0), settings)
    assert seen.count(2.0) == 3
    assert seen[seen.index(2.0):seen.index(2.0) + 3] == [2.0, 2.0, 2.0], "repeats come before moving on"
    assert 2.0 in b.inconclusive_scales and b.pass_scale == 2.0 and not b.pass_confident
    assert "inconclusive: passed by majority" in b.sentence


def test_a_level_probed_to_a_tie_fails_and_confident_disagreement_is_noisy() -> None:
    a = probe_outcome(step(0, 2.0, [tier_step("t", "pass", False)]))
    b = probe_outcome(step(1, 2.0, [tier_step("t", "fail", False)]))
    tie = level_verdict([a, b], repeats=1)
    assert tie is not None and tie.outcome == "fail" and not tie.confident
    assert level_verdict([a], repeats=1) is None  # one unsure probe: probe again
    sure_pass = probe_outcome(step(2, 2.0, [tier_step("t", "pass", True)]))
    sure_fail = probe_outcome(step(3, 2.0, [tier_step("t", "fail", True)]))
    noisy = level_verdict([sure_pass, sure_fail], repeats=1)
    assert noisy is not None and noisy.outcome == "fail" and noisy.noisy and not noisy.confident


def test_boundary_below_and_above_the_range() -> None:
    seen, below = search(threshold_stack(0.1), SearchSettings(low=0.5, high=8.0))
    assert seen == [0.5] and below.status == "below_range" and below.fail_scale == 0.5
    assert "below the range" in below.sentence
    seen, above = search(threshold_stack(100.0), SearchSettings(low=0.5, high=8.0))
    assert seen == [0.5, 8.0] and above.status == "above_range" and above.pass_scale == 8.0
    assert "above the range" in above.sentence


def test_an_invalid_run_is_never_a_confident_pass() -> None:
    probe = probe_outcome(step(0, 1.0, [tier_step("t", "pass", True)], valid=False))
    assert probe.outcome == "pass" and not probe.confident and "run invalid" in probe.line


def test_one_confident_failure_decides_and_tiers_without_slo_are_ignored() -> None:
    probe = probe_outcome(step(0, 1.0, [tier_step("a", "pass", False), tier_step("b", "fail", True),
                                        tier_step("c", "no_slo", False)]))
    assert probe.outcome == "fail" and probe.confident
    assert [t.outcome for t in probe.tiers] == ["pass", "fail", "no_slo"]
    only = probe_outcome(step(0, 1.0, [tier_step("c", "no_slo", False)]))
    b = boundary([only], [step(0, 1.0, [tier_step("c", "no_slo", False)])], SearchSettings(low=1, high=2))
    assert b.status == "no_slo" and "no boundary" in b.sentence


def test_each_probe_line_gives_the_checks_interval() -> None:
    c = Check(check="ttft_ms.p99", threshold=2000.0, observed=812.0, low=760.0, high=880.0, passed=True,
              confident=True)
    assert check_line(c) == "ttft_ms.p99 812 ms [760 ms, 880 ms] vs ≤ 2.00 s: pass"
    d = Check(check="max_drop_rate", threshold=0.05, observed=0.04, low=0.01, high=0.09, passed=True,
              confident=False)
    assert check_line(d) == "max_drop_rate 4.0 % [1.0 %, 9.0 %] vs ≤ 5.0 %: pass (interval straddles the threshold)"
    f = Check(check="floor_share", threshold=0.05, observed=0.03, low=0.01, high=0.04, passed=False, confident=True)
    assert check_line(f) == "floor_share 3.0 % [1.0 %, 4.0 %] vs ≥ 5.0 %: fail"  # a floor: at least, not at most


def test_cliffs_only_between_adjacent_close_levels() -> None:
    s = SearchSettings(low=1.0, high=4.0)
    steps = [step(0, 1.0, [tier_step("t", "pass", True)]), step(1, 2.0, [tier_step("t", "pass", True)]),
             step(2, 2.5, [tier_step("t", "fail", True, drop=0.4)]), step(3, 4.0, [tier_step("t", "fail", True, 0.9)])]
    cliffs = find_cliffs(steps, s)
    assert [(c.from_scale, c.to_scale) for c in cliffs] == [(2.0, 2.5)]
    assert cliffs[0].what == "not served 0.0 % → 40.0 %"
    far = find_cliffs([steps[0], steps[3]], s)  # 1× → 4×: a big change over a 4× load step is no cliff
    assert far == []
    ttft = find_cliffs([step(0, 1.0, [tier_step("t", "pass", True, ttft=100)]),
                        step(1, 1.2, [tier_step("t", "pass", True, ttft=500)])], s)
    assert [c.what for c in ttft] == ["TTFT p99 100 ms → 500 ms"]


def test_midpoint_is_geometric_and_settings_are_checked() -> None:
    assert midpoint(1.0, 4.0) == 2.0 and midpoint(0.5, 8.0) == 2.0
    with pytest.raises(ValueError, match="0 < low < high"):
        SearchSettings(low=2.0, high=1.0)
    with pytest.raises(ValueError, match="at least 2 probes"):
        SearchSettings(low=1.0, high=2.0, max_probes=1)
