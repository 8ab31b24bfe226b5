"""The regression rule on synthetic runs: a slowed candidate is flagged, reseeded twins are not."""

from __future__ import annotations

import numpy as np
import pytest

from audit.compare import RegressionRule, TierSamples, compare_pair, result_of, served_samples

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


def test_served_samples_from_records() -> None:
    lines = [
        {"kind": "request", "tier": "a", "status": 200, "complete": True, "sent_ns": 2_000_000,
         "first_token_ns": 12_000_000, "done_ns": 52_000_000},
        {"kind": "request", "tier": "a", "status": 200, "complete": True, "sent_ns": 1_000_000,
         "first_token_ns": 6_000_000, "done_ns": 9_000_000},
        {"kind": "request", "tier": "a", "status": 429, "complete": False, "sent_ns": 0},
        {"kind": "request", "tier": "a", "status": 200, "complete": False, "sent_ns": 0, "first_token_ns": 1},
        {"kind": "health", "tier": "a"},
    ]
    s = served_samples(lines)["a"]
    assert s.ttft_ms.tolist() == [5.0, 10.0]  # send order
    assert s.e2e_ms.tolist() == [8.0, 50.0]
