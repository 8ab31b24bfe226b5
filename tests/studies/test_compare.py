"""The regression rule on synthetic runs: a slowed candidate is flagged, reseeded twins are not."""

from __future__ import annotations

import numpy as np
import pytest

from rushhour.studies.compare import RegressionRule, TierSamples, compare_pair, result_of, served_samples

from .helpers import summary, tier


def _samples(seed: int, scale: float = 1.0, n: int = 600) -> dict[str, TierSamples]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, mu in (("interactive", 5.5), ("batch", 7.0)):
        ttft = rng.lognormal(mu, 0.7, n) * scale
        out[name] = TierSamples(ttft, ttft + rng.lognormal(7.5, 0.4, n) * scale)
    return out


def _summary(seed: int, drops: int = 6, valid: bool = True):
    tiers = [tier("interactive", 100, 600, 0, 900.0), tier("batch", -1, 600, drops, 4000.0)]
    return summary(tiers, [], run_id=f"run-{seed}", seed=seed, valid=valid)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_reseeded_twin_is_not_a_regression(seed: int) -> None:
    cmp = compare_pair(_summary(1), _samples(1), _summary(seed, drops=8), _samples(seed), n_boot=800)
    assert cmp.verdict == "ok", cmp.regressions
    assert len(cmp.tests) == 6 and len(cmp.shifts) == 4


def test_slowed_candidate_is_a_regression() -> None:
    cmp = compare_pair(_summary(1), _samples(1), _summary(2), _samples(2, scale=1.6), n_boot=800)
    assert cmp.verdict == "regression"
    flagged = {(t.tier, t.metric) for t in cmp.tests if t.regression}
    assert ("interactive", "ttft_p99") in flagged and ("batch", "e2e_p99") in flagged
    shift = next(s for s in cmp.shifts if s.tier == "interactive" and s.metric == "ttft")
    assert shift.p_greater < 1e-6 and shift.prob_superiority > 0.6
    assert result_of([cmp], RegressionRule()).exit_code == 1


def test_drop_rate_rule_needs_significance_and_size() -> None:
    worse = compare_pair(_summary(1, drops=6), _samples(1), _summary(2, drops=60), _samples(2), n_boot=400)
    assert [t.metric for t in worse.tests if t.regression] == ["drop_rate"]
    small = compare_pair(_summary(1, drops=6), _samples(1), _summary(2, drops=11), _samples(2), n_boot=400)
    assert small.verdict == "ok"  # +0.8 points: under the 1-point practical threshold


def test_invalid_run_exit_code() -> None:
    cmp = compare_pair(_summary(1), _samples(1), _summary(2, valid=False), _samples(2), n_boot=200)
    assert cmp.verdict == "invalid"
    assert result_of([cmp], RegressionRule()).exit_code == 2


def test_few_samples_are_reported_not_judged() -> None:
    cmp = compare_pair(_summary(1), _samples(1, n=10), _summary(2), _samples(2, scale=3.0, n=10), n_boot=200)
    lat = [t for t in cmp.tests if t.metric != "drop_rate"]
    assert all(not t.judged and not t.regression for t in lat)


def test_served_samples_from_the_attempts_table() -> None:
    """The audit's class decides "served", and calibration probes are not the first tier's latencies."""
    import pandas as pd

    table = pd.DataFrame({
        "tier": ["a", "a", "a", "a", "a"],
        "class": ["served", "served", "queue_full", "unclassified", "served"],
        "probe": [False, False, False, False, True],
        "sent_ns": [2e6, 1e6, 0.0, 0.0, 0.0],
        "ttft_ns": [10e6, 5e6, float("nan"), 1.0, 1e6],
        "e2e_ns": [50e6, 8e6, float("nan"), 1.0, 2e6],
    })
    s = served_samples(table)["a"]
    assert s.ttft_ms.tolist() == [5.0, 10.0]  # send order, the probe left out
    assert s.e2e_ms.tolist() == [8.0, 50.0]


def test_an_slo_pass_that_became_a_fail_is_flagged_without_significance() -> None:
    """Issue 12: compare said 'ok' while a tier's gate went from pass to fail on a small, noisy change."""
    from .helpers import verdicts_for

    base_t = tier("batch", -1, 600, 6, 4000.0)
    cand_t = tier("batch", -1, 600, 7, 4000.0)  # 1.0 % → 1.17 %: not significant, but over a 1.1 % ceiling
    base = summary([base_t], verdicts_for(base_t, None, 0.011), run_id="a")
    cand = summary([cand_t], verdicts_for(cand_t, None, 0.011), run_id="b")
    cmp = compare_pair(base, {}, cand, {}, n_boot=200)
    assert not any(t.regression for t in cmp.tests)
    assert cmp.slo_flips and "batch max_drop_rate: passed in the baseline, failed in the candidate" in cmp.slo_flips[0]
    assert cmp.verdict == "regression" and result_of([cmp], RegressionRule()).exit_code == 1


def test_a_changed_target_profile_or_scenario_is_flagged() -> None:
    base = _summary(1)
    cand = _summary(2).model_copy(update={"run": _summary(2).run.model_copy(
        update={"target": "http://127.0.0.1:9", "profile": "vllm", "scenario": "other"})})
    cmp = compare_pair(base, _samples(1), cand, _samples(2), n_boot=200)
    assert cmp.changes == ["scenario changed: 's' → 'other'", "target changed: 'testbed' → 'http://127.0.0.1:9'",
                           "profile changed: 'llm-d' → 'vllm'"]
    assert all(any(c in w for w in cmp.warnings) for c in cmp.changes)
