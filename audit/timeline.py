"""Per-tier series over time and the saturation windows seen in the outcomes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rushhour.audit.fold import NS_PER_MS, NS_PER_S, eq
from rushhour.audit.stats import group_quantiles, merge_bucket_mask
from rushhour.audit.summary import UNSERVED_CLASSES, TierSeries

MAX_BUCKETS = 600
NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
INFLATION_SATURATED_X = 3.0  # a bucket whose median TTFT is > 3× idle is queue-driven saturation
WINDOW_MAX_GAP = 1  # merge saturated runs separated by fewer than 2 buckets


def bucket_size_s(duration_s: float) -> float:
    """1 s for runs under 10 minutes, else the smallest round size giving at most ~600 buckets."""
    for size in NICE_BUCKETS_S:
        if duration_s / size <= MAX_BUCKETS:
            return float(size)
    return float(math.ceil(duration_s / MAX_BUCKETS))


@dataclass
class Grid:
    """The run's time buckets."""

    bucket_s: float
    count: int

    @property
    def bucket_ns(self) -> float:
        return self.bucket_s * NS_PER_S

    def index(self, t_ns: np.ndarray | pd.Series) -> np.ndarray:
        """Bucket index per time (−1 for missing or before the anchor); late times go to the last bucket."""
        t = np.asarray(t_ns, dtype=np.float64)
        idx = np.floor(t / self.bucket_ns)
        idx = np.where(np.isfinite(idx) & (idx >= 0), np.minimum(idx, self.count - 1), -1)
        return idx.astype(np.int64)

    def starts(self) -> list[float]:
        return [round(i * self.bucket_s, 6) for i in range(self.count)]


def make_grid(duration_s: float) -> Grid:
    size = bucket_size_s(max(duration_s, 1e-9))
    return Grid(size, max(1, math.ceil(duration_s / size)))


def _counts(idx: np.ndarray, mask: np.ndarray, n: int) -> list[int]:
    sel = idx[mask & (idx >= 0)]
    return [int(v) for v in np.bincount(sel, minlength=n)[:n]]


def _bucket_quantiles(idx: np.ndarray, values: np.ndarray, n: int, qs: tuple[float, ...]) -> list[list[float | None]]:
    ok = (idx >= 0) & np.isfinite(values)
    out: list[list[float | None]] = [[None] * n for _ in qs]
    if not ok.any():
        return out
    table = group_quantiles(idx[ok], values[ok], qs, n)  # as a groupby's quantiles, from one sort
    present = np.flatnonzero(np.bincount(idx[ok], minlength=n))
    for j in range(len(qs)):
        for b in present:
            out[j][int(b)] = float(table[j, b])
    return out


def tier_series(attempts: pd.DataFrame, grid: Grid) -> TierSeries:
    """Attempts of one tier per bucket: offered at intended time, outcomes at the time they were known."""
    n = grid.count
    cls = attempts["cls"]
    end_idx = grid.index(attempts["t_end_ns"])
    offered_idx = grid.index(attempts["intended_ns"])
    first_idx = grid.index(attempts["first_token_ns"])
    served = eq(cls, "served")
    ttft_ms = attempts["ttft_ns"].to_numpy(dtype=np.float64) / NS_PER_MS
    ttft_ms = np.where(served, ttft_ms, np.nan)
    p50, p99 = _bucket_quantiles(first_idx, ttft_ms, n, (0.5, 0.99))
    return TierSeries(
        offered=_counts(offered_idx, np.ones(len(attempts), dtype=bool), n),
        served=_counts(end_idx, served, n),
        unserved={c: _counts(end_idx, eq(cls, c), n) for c in UNSERVED_CLASSES},
        ttft_p50_ms=p50,
        ttft_p99_ms=p99,
    )


def outcome_saturation_mask(attempts: pd.DataFrame, ratio: np.ndarray, grid: Grid) -> np.ndarray:
    """Buckets with any policy drop of any tier, or a median TTFT inflation above 3× idle in some tier.

    Only policy drops (queue full, shed, …) mark saturation: a refused connection says the target is
    down, not that it is saturated.
    """
    mask = np.zeros(grid.count, dtype=bool)
    dropped = attempts["policy_drop"].to_numpy()
    idx = grid.index(attempts["t_end_ns"])
    mask[idx[dropped & (idx >= 0)]] = True
    first_idx = grid.index(attempts["first_token_ns"])
    ok = (first_idx >= 0) & np.isfinite(ratio) & attempts["served"].to_numpy()
    if ok.any():
        frame = pd.DataFrame({"tier": attempts["tier"].cat.codes.to_numpy()[ok] if isinstance(
            attempts["tier"].dtype, pd.CategoricalDtype) else attempts["tier"].to_numpy()[ok], "b": first_idx[ok],
                              "r": ratio[ok]})
        med = frame.groupby(["tier", "b"])["r"].median()
        hot = med[med > INFLATION_SATURATED_X].index.get_level_values("b").to_numpy(dtype=np.int64)
        mask[hot] = True
    return mask


def windows_from_mask(mask: np.ndarray, grid: Grid) -> list[tuple[float, float]]:
    """Saturated buckets merged into windows [start_s, end_s) (gaps of one bucket are bridged)."""
    return [(a * grid.bucket_s, (b + 1) * grid.bucket_s) for a, b in merge_bucket_mask(mask, WINDOW_MAX_GAP)]


def in_windows(t_ns: np.ndarray | pd.Series, windows: list[tuple[float, float]]) -> np.ndarray:
    """Whether each time (ns) falls inside any window (seconds)."""
    t = np.asarray(t_ns, dtype=np.float64) / NS_PER_S
    out = np.zeros(len(t), dtype=bool)
    for start, end in windows:
        out |= (t >= start) & (t < end)
    return out
