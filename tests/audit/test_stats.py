"""Statistics on hand-computed data: exact known values, not values the code produced."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rushhour.audit.fairness import find_inversions, floor_share, starvation_gap_s, tenant_jain
from rushhour.audit.fold import fold_logical, prepare_attempts
from rushhour.audit.stats import (
    bootstrap_quantile_ci,
    cdf_points,
    group_quantiles,
    jain_index,
    longest_gap,
    merge_bucket_mask,
    merge_intervals,
    percentiles,
    wilson,
)
from rushhour.audit.timeline import Grid, bucket_size_s, make_grid, windows_from_mask

S = 1e9


def test_wilson_known_values() -> None:
    r = wilson(5, 10)
    assert r.value == 0.5
    assert r.low == pytest.approx(0.2366, abs=1e-4)
    assert r.high == pytest.approx(0.7634, abs=1e-4)
    zero = wilson(0, 10)
    assert zero.low == 0.0
    assert zero.high == pytest.approx(0.2775, abs=1e-4)  # z²/(n+z²)
    full = wilson(20, 20)
    assert full.high == 1.0 and full.low == pytest.approx(0.8389, abs=1e-4)
    empty = wilson(0, 0)  # no evidence: no value and no interval (never a confident 0 or [0, 1])
    assert empty.value is None and empty.low is None and empty.high is None and empty.n == 0
    one = wilson(1, 1)
    assert one.value == 1.0 and one.high == 1.0 and 0.0 < (one.low or 0.0) < 1.0
    none = wilson(0, 1)
    assert none.low == 0.0 and none.high == pytest.approx(1.0 - (one.low or 0.0))  # symmetric


def test_percentiles_known_values() -> None:
    p = percentiles(np.arange(1, 101, dtype=float))
    got = (p.n, p.p50, p.p90, p.p95, p.p99, p.max, p.mean)
    assert got == pytest.approx((100, 50.5, 90.1, 95.05, 99.01, 100.0, 50.5), abs=1e-9)
    scaled = percentiles([1e6, 2e6, 3e6, np.nan], scale=1e-6)
    assert scaled.n == 3 and scaled.p50 == 2.0
    assert percentiles([]).n == 0 and percentiles([]).p99 is None


def test_bootstrap_interval() -> None:
    const = np.full(50, 7.0)
    assert bootstrap_quantile_ci(const, 0.99) == (7.0, 7.0)
    rng = np.random.default_rng(1)
    values = np.sort(rng.uniform(0, 1, 4000))
    low, high = bootstrap_quantile_ci(values, 0.5)
    # the median's standard error for U(0,1) is sqrt(.25/n) ≈ 0.0079: a 95 % interval ≈ ±0.0155
    assert low < np.median(values) < high
    assert 0.02 < high - low < 0.045
    assert bootstrap_quantile_ci(values, 0.5) == (low, high)  # seeded
    p = percentiles(values)
    assert set(p.ci) == {"p50", "p90", "p95", "p99"}
    assert p.ci["p99"][0] <= p.p99 <= p.ci["p99"][1]  # type: ignore[operator]


def test_cdf_points() -> None:
    pts = cdf_points(np.arange(0, 101, dtype=float))
    assert len(pts) == 101 and pts[0] == 0 and pts[50] == 50 and pts[100] == 100
    assert cdf_points(np.array([])) == []


def test_jain_known_values() -> None:
    assert jain_index([1, 1, 1, 1]) == 1.0
    assert jain_index([1, 0, 0, 0]) == 0.25
    assert jain_index([1, 2, 3]) == pytest.approx(36 / 42)
    assert jain_index([]) is None
    assert tenant_jain([0.5]) == 1.0


def test_merge_intervals_and_longest_gap() -> None:
    s, e = merge_intervals(np.array([5.0, 0.0, 2.0, 20.0]), np.array([10.0, 3.0, 4.0, 21.0]))
    assert list(s) == [0.0, 5.0, 20.0] and list(e) == [4.0, 10.0, 21.0]
    # demand [0, 10] served at 2 and 5 → pieces 2, 3, 5; demand [20, 21] never served → 1
    assert longest_gap(np.array([0.0, 20.0]), np.array([10.0, 21.0]), np.array([2.0, 5.0, 15.0])) == 5.0
    assert longest_gap(np.array([0.0]), np.array([4.0]), np.array([])) == 4.0
    assert longest_gap(np.array([]), np.array([]), np.array([1.0])) is None


def test_group_quantiles_are_pandas_groupby_quantiles_to_the_bit() -> None:
    """The tenants' p99 and the timeline's bucket quantiles come from one sort; summary.json must not move
    by a bit against pandas' groupby quantile (ties, NaN, one-value groups, empty groups, infinities)."""
    rng = np.random.default_rng(20261201)
    for trial in range(300):
        n, width = int(rng.integers(1, 2000)), int(rng.integers(1, 40))
        keys = rng.integers(0, width, n)
        values = rng.lognormal(5, 1.5, n).round(trial % 3)  # rounded: many ties
        values[rng.random(n) < 0.15] = np.nan
        if trial % 5 == 0:
            values[rng.random(n) < 0.02] = np.inf
        qs = (0.5, 0.9, 0.99)
        got = group_quantiles(keys, values, qs, width)
        expected = pd.DataFrame({"k": keys, "v": values}).groupby("k")["v"].quantile(list(qs)).unstack()
        for row, q in enumerate(qs):
            want = np.full(width, np.nan)
            want[expected.index.to_numpy()] = expected[q].to_numpy()
            assert np.array_equal(got[row], want, equal_nan=True), (trial, q)


def test_bucket_mask_windows() -> None:
    # gaps < 2 buckets are bridged; two empty buckets split
    assert merge_bucket_mask(np.array([1, 1, 0, 1, 0, 0, 1], dtype=bool)) == [(0, 3), (6, 6)]
    assert merge_bucket_mask(np.zeros(4, dtype=bool)) == []
    grid = Grid(2.0, 10)
    assert windows_from_mask(np.array([0, 1, 1, 0, 0, 0, 0, 0, 0, 1], dtype=bool), grid) == [(2.0, 6.0), (18.0, 20.0)]


def test_bucket_size() -> None:
    assert bucket_size_s(30) == 1.0
    assert bucket_size_s(599) == 1.0
    assert bucket_size_s(601) == 2.0
    assert bucket_size_s(3600) == 10.0
    assert make_grid(59.5).count == 60


def _attempts(rows: list[dict[str, object]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for col in ("sent_ns", "first_token_ns", "last_token_ns", "done_ns", "intended_ns", "headers_ns"):
        if col not in frame:
            frame[col] = np.nan
        frame[col] = frame[col].astype("float64")
    frame["not_sent"] = False
    frame["persona"] = "chat"
    frame["request_id"] = [f"a{i}" for i in range(len(frame))]
    frame["seq"] = np.arange(len(frame), dtype=float)
    return prepare_attempts(frame, frame.pop("cls").astype("category"))


def test_fold_retries() -> None:
    att = _attempts([
        {"logical_id": "L1", "attempt": 1, "cls": "queue_full", "tier": "t", "sent_ns": 0, "intended_ns": 0},
        {"logical_id": "L1", "attempt": 2, "cls": "served", "tier": "t", "sent_ns": 2 * S, "intended_ns": 1.5 * S,
         "first_token_ns": 2.5 * S, "done_ns": 3 * S},
        {"logical_id": "L2", "attempt": 2, "cls": "queue_full", "tier": "t", "sent_ns": 5 * S},
        {"logical_id": "L2", "attempt": 1, "cls": "overloaded", "tier": "t", "sent_ns": 4 * S},
        {"logical_id": "L3", "attempt": 1, "cls": "served", "tier": "t", "sent_ns": 6 * S, "first_token_ns": 6.1 * S},
        {"logical_id": "L3", "attempt": 2, "cls": "failed", "tier": "t", "sent_ns": 7 * S},  # hedged: served wins
    ])
    logical = fold_logical(att).set_index("logical_id")
    assert logical.loc["L1", "cls"] == "served" and logical.loc["L1", "attempts"] == 2
    # wait from the first attempt's intended time (0) to the first token (2.5 s), not from the retry's send
    assert logical.loc["L1", "ttft_intended_ns"] == 2.5 * S
    assert logical.loc["L1", "ttft_ns"] == 0.5 * S
    assert logical.loc["L2", "cls"] == "queue_full"  # the last attempt decides
    assert logical.loc["L3", "cls"] == "served"
    assert len(att) / len(logical) == 2.0


def test_starvation_gap_from_attempts() -> None:
    att = _attempts([
        # waits 0 → 60 s and is dropped; the only service in between is at 20 s
        {"logical_id": "a", "attempt": 1, "cls": "queue_timeout", "tier": "b", "sent_ns": 0, "done_ns": 60 * S},
        {"logical_id": "b", "attempt": 1, "cls": "served", "tier": "b", "sent_ns": 10 * S, "first_token_ns": 20 * S,
         "done_ns": 21 * S},
    ])
    assert starvation_gap_s(att) == 40.0


def test_inversion_detection() -> None:
    grid = Grid(1.0, 10)
    rows: list[dict[str, object]] = [
        # bucket 3: high dropped, low starts being served → one inversion bucket
        {"logical_id": "h1", "attempt": 1, "cls": "queue_full", "tier": "high", "sent_ns": 3.1 * S,
         "done_ns": 3.2 * S},
        {"logical_id": "l1", "attempt": 1, "cls": "served", "tier": "low", "sent_ns": 3.0 * S,
         "first_token_ns": 3.5 * S, "done_ns": 3.9 * S},
        # bucket 6: low served, high served too (no drop) → no inversion
        {"logical_id": "h2", "attempt": 1, "cls": "served", "tier": "high", "sent_ns": 6.0 * S,
         "first_token_ns": 6.1 * S, "done_ns": 6.2 * S},
        {"logical_id": "l2", "attempt": 1, "cls": "served", "tier": "low", "sent_ns": 6.0 * S,
         "first_token_ns": 6.1 * S, "done_ns": 6.2 * S},
    ]
    att = _attempts(rows)
    pairs = find_inversions(att, {"high": 10, "low": 0}, [(0.0, 10.0)], grid)
    assert len(pairs) == 1
    assert (pairs[0].high, pairs[0].low, pairs[0].buckets) == ("high", "low", [3.0])
    assert pairs[0].served_low == 1 and pairs[0].dropped_high == 1
    # outside saturation windows nothing counts
    assert find_inversions(att, {"high": 10, "low": 0}, [(5.0, 10.0)], grid) == []


def test_inversion_p50() -> None:
    grid = Grid(1.0, 20)
    rows: list[dict[str, object]] = []
    for i in range(6):
        rows.append({"logical_id": f"h{i}", "attempt": 1, "cls": "served", "tier": "high", "sent_ns": i * S,
                     "first_token_ns": i * S + 2 * S, "done_ns": i * S + 3 * S})
        rows.append({"logical_id": f"l{i}", "attempt": 1, "cls": "served", "tier": "low", "sent_ns": i * S,
                     "first_token_ns": i * S + 0.5 * S, "done_ns": i * S + 1 * S})
    pairs = find_inversions(_attempts(rows), {"high": 1, "low": 0}, [(0.0, 10.0)], grid)
    assert len(pairs) == 1 and pairs[0].p50_windows[0]["low_p50_ms"] == 500.0
    assert pairs[0].p50_windows[0]["high_p50_ms"] == 2000.0


def test_floor_share() -> None:
    floor, rate = floor_share(5, 100, 0.10)
    assert floor.share == 0.05 and floor.passed is False and rate.k == 5
    floor, _ = floor_share(20, 100, 0.10)
    assert floor.passed is True
    floor, _ = floor_share(0, 0, 0.10)
    assert floor.share is None and floor.passed is None


# --------------------------------------------------------------------------- Kaplan–Meier (censored waits)


def test_kaplan_meier_hand_computed() -> None:
    from rushhour.audit.stats import kaplan_meier

    # events at 1, 2, 4; censored at 3 and 5. At risk: 5, 4, 2. S = .8, .8·.75 = .6, .6·.5 = .3
    t, surv, gw = kaplan_meier(np.array([1.0, 2, 3, 4, 5]), np.array([False, False, True, False, True]))
    assert list(t) == [1, 2, 4]
    assert surv == pytest.approx([0.8, 0.6, 0.3])
    # Greenwood: 1/(5·4), + 1/(4·3), + 1/(2·1)
    assert gw == pytest.approx([1 / 20, 1 / 20 + 1 / 12, 1 / 20 + 1 / 12 + 1 / 2])


def test_km_percentiles_estimates_and_lower_bounds() -> None:
    from rushhour.audit.stats import km_percentiles

    p = km_percentiles([1.0, 2, 3, 4, 5], [False, False, True, False, True])
    assert p.n == 5 and p.censored == 2
    assert p.p50 == 4.0 and "p50" not in p.lower_bound  # S(4) = .3 ≤ .5
    # S never reaches .1: p90 is only known to exceed the longest wait seen (5)
    assert p.p90 == 5.0 and {"p90", "p95", "p99", "max", "mean"} <= set(p.lower_bound)


def test_km_censoring_at_a_tie_stays_at_risk() -> None:
    from rushhour.audit.stats import kaplan_meier

    _, surv, _ = kaplan_meier(np.array([2.0, 2.0, 3.0]), np.array([False, True, False]))
    assert surv == pytest.approx([2 / 3, 0.0])  # at 2: 1 event of 3 at risk; at 3: 1 of 1


def test_wait_percentiles_without_censoring_is_the_plain_path() -> None:
    from rushhour.audit.stats import percentiles, wait_percentiles

    values = np.arange(1.0, 101.0)
    assert wait_percentiles(values, np.array([])) == percentiles(values)


def test_km_all_censored_is_all_bounds() -> None:
    from rushhour.audit.stats import km_percentiles

    p = km_percentiles([3.0, 7.0], [True, True])
    assert p.p50 == 7.0 and set(p.lower_bound) >= {"p50", "p99", "max"}


def test_km_interval_brackets_the_estimate() -> None:
    from rushhour.audit.stats import km_percentiles

    rng = np.random.default_rng(1)
    t = rng.exponential(1.0, 2000)
    cut = rng.random(2000) < 0.1
    p = km_percentiles(t, cut)
    lo, hi = p.ci["p50"]
    assert lo <= p.p50 <= hi and abs(p.p50 - np.log(2)) < 0.1  # type: ignore[operator]
