"""Pure statistics: Wilson intervals, percentiles (bootstrap intervals; Kaplan–Meier under censoring), Jain, gaps."""

from __future__ import annotations

import math

import numpy as np

from rushhour.audit.summary import Percentiles, Rate

Z95 = 1.959963984540054
QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
BOOTSTRAP_REPLICATES = 2000
BOOTSTRAP_SEED = 20240611


def wilson(k: int, n: int, z: float = Z95) -> Rate:
    """k/n with its Wilson score interval (well-behaved at 0, 1 and small n)."""
    k, n = int(k), int(n)
    if n <= 0:
        return Rate(k=k, n=n, value=None, low=None, high=None)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if k == 0 else max(0.0, centre - half)  # exact ends: float noise must not show as 7e-18
    high = 1.0 if k == n else min(1.0, centre + half)
    return Rate(k=k, n=n, value=p, low=low, high=high)


def bootstrap_quantile_ci(
    sorted_values: np.ndarray, q: float, *, replicates: int = BOOTSTRAP_REPLICATES, seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the q-quantile, in O(replicates) whatever the sample size.

    Resampling n values with replacement from the empirical distribution and taking the k-th smallest
    is the same as taking ``x[floor(n · U_(k))]`` where ``U_(k) ~ Beta(k, n + 1 − k)`` is the k-th
    order statistic of n uniforms. So each replicate is one Beta draw and one index: the exact
    bootstrap distribution of the order statistic, seeded, vectorised, without materialising resamples.
    ``sorted_values`` need only be in order at those indices (``bootstrap_indices``: see ``percentiles``).
    """
    n = len(sorted_values)
    if n == 0:
        return (math.nan, math.nan)
    return _interval(sorted_values[bootstrap_indices(n, q, replicates=replicates, seed=seed)], level)


def _interval(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` interval of the bootstrap draws."""
    alpha = (1 - level) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return (float(low), float(high))


def bootstrap_indices(n: int, q: float, *, replicates: int = BOOTSTRAP_REPLICATES,
                      seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """The sorted positions ``bootstrap_quantile_ci`` reads for the q-quantile of n values (seeded: always the same)."""
    rng = np.random.default_rng(seed)
    k = min(n, max(1, round(q * (n - 1)) + 1))  # 1-based order statistic nearest the quantile
    u = rng.beta(k, n + 1 - k, size=replicates)
    return np.minimum((u * n).astype(np.int64), n - 1)


def sorted_quantiles(sorted_values: np.ndarray, qs: list[float] | np.ndarray) -> np.ndarray:
    """``np.quantile(sorted_values, qs)`` (its default 'linear' method, bit for bit) of an already sorted array.

    numpy partitions its input again even when it is sorted; at a million values per tier figure that
    second pass was a tenth of the audit's time. Same virtual index, neighbours and lerp as numpy's.
    """
    n = len(sorted_values)
    q = np.asarray(qs, dtype=np.float64)
    virtual = (n - 1) * q
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = -1
    following[above] = -1
    below = virtual < 0
    previous[below] = 0
    following[below] = 0
    lo, hi = previous.astype(np.intp), following.astype(np.intp)
    a, b = sorted_values[lo], sorted_values[hi]
    gamma = virtual - lo
    diff = b - a
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return out


def percentiles(values: np.ndarray | list[float], *, scale: float = 1.0, ci: bool = True) -> Percentiles:
    """p50/p90/p95/p99/max/mean of the finite values (times ``scale``), with bootstrap intervals."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    n = len(arr)
    if n == 0:
        return Percentiles(n=0)
    draws = {name: bootstrap_indices(n, q) for name, q in QUANTILES.items()} if ci else {}
    arr = ordered_at(arr, [_neighbours(n, list(QUANTILES.values())), *draws.values()]) * scale
    qs = sorted_quantiles(arr, list(QUANTILES.values()))
    fields = {name: float(v) for name, v in zip(QUANTILES, qs, strict=True)}
    intervals = {name: _interval(arr[idx]) for name, idx in draws.items()}  # the positions ordered above
    return Percentiles(n=n, mean=float(arr.mean()), max=float(arr[-1]), ci=intervals,
                       p50=fields["p50"], p90=fields["p90"], p95=fields["p95"], p99=fields["p99"])


def _neighbours(n: int, qs: list[float]) -> np.ndarray:
    """The sorted positions ``sorted_quantiles`` reads for ``qs`` of n values, and the last (the max)."""
    virtual = (n - 1) * np.asarray(qs, dtype=np.float64)
    lo = np.floor(virtual).astype(np.int64)
    return np.clip(np.concatenate([lo, lo + 1, [n - 1]]), 0, n - 1)


SELECT_MIN = 4096  # below this a sort is as quick as selecting


def ordered_at(values: np.ndarray, positions: list[np.ndarray]) -> np.ndarray:
    """``values`` rearranged so that every given position holds what a full sort would put there.

    Two partitions bracket each cluster of positions (a quantile's bootstrap draws span ~±4σ of order
    statistics around it), and only those windows are sorted: at 300k values, a third of ``np.sort``'s
    time. The values elsewhere are the right ones, in no order (their mean is the same, up to rounding).
    """
    n = len(values)
    if n < SELECT_MIN:
        return np.sort(values)
    wanted = np.unique(np.concatenate(positions))
    # windows: runs of wanted positions less than a few hundred apart (sorting a small gap is cheaper than a cut)
    breaks = np.flatnonzero(np.diff(wanted) > 256)
    starts = np.concatenate([[wanted[0]], wanted[breaks + 1]])
    ends = np.concatenate([wanted[breaks], [wanted[-1]]]) + 1  # exclusive
    out = np.partition(values, np.unique(np.concatenate([starts, ends - 1])))
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        if b - a > 2:
            out[a:b].sort()
    return out


FEW_GROUPS = 2048  # up to this many groups, each is sorted on its own (a Python step per group)


def group_quantiles(keys: np.ndarray, values: np.ndarray, qs: tuple[float, ...], width: int) -> np.ndarray:
    """Each ``q``-quantile of each group's non-NaN ``values``: shape (len(qs), width), NaN for a group without any.

    Groups are the integers ``0 … width − 1`` in ``keys``. The same numbers as pandas'
    ``groupby(keys)[values].quantile(q)`` (linear interpolation computed as pandas computes it: value +
    (next − value) × fraction), from one sort of the values instead of a groupby.
    """
    ok = ~np.isnan(values)
    k, v = keys[ok], values[ok]
    counts = np.bincount(k, minlength=width)
    few = np.count_nonzero(counts) <= FEW_GROUPS
    if not few:  # many small groups: one argsort by value first; the stable sort by group below keeps it
        by_value = np.argsort(v)
        v, k = v[by_value], k[by_value]
    v = v[np.argsort(k.astype(np.uint16) if width <= 1 << 16 else k, kind="stable")]  # 16-bit keys: a radix sort
    if few:
        # then each group's values sorted in place: a third of the time of an argsort of every value (the
        # values are all that is read: their rows need no order)
        bounds = np.cumsum(counts).tolist()
        for lo, hi in zip([0, *bounds[:-1]], bounds, strict=True):
            if hi - lo > 1:
                v[lo:hi].sort()
    out = np.full((len(qs), width), np.nan)
    has = counts > 0
    n = counts[has]
    start = (np.cumsum(counts) - counts)[has]
    for row, q in enumerate(qs):
        q_idx = q * (n - 1).astype(np.float64)
        idx = q_idx.astype(np.int64)  # truncated: the order statistic at or below the quantile
        frac = q_idx % 1
        val = v[start + idx]
        nxt = v[start + np.minimum(idx + 1, n - 1)]
        with np.errstate(invalid="ignore"):
            out[row, has] = np.where(frac == 0.0, val, val + (nxt - val) * frac)
    return out


def kaplan_meier(times: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct event times, survival S(t) after each, Greenwood's Σ d/(n(n−d)) up to each).

    ``censored[i]`` means observation i only says "took at least ``times[i]``" (a wait the run cut).
    A censored observation at the same time as an event is still at risk at that time (the usual
    convention). Vectorised: one sort and a few cumulative sums.
    """
    t = np.asarray(times, dtype=np.float64)
    c = np.asarray(censored, dtype=bool)
    ok = np.isfinite(t)
    t, c = t[ok], c[ok]
    events = np.sort(t[~c])
    if len(events) == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    uniq, d = np.unique(events, return_counts=True)
    everyone = np.sort(t)
    at_risk = len(everyone) - np.searchsorted(everyone, uniq, side="left")
    survival = np.cumprod(1.0 - d / at_risk)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(at_risk > d, d / (at_risk * (at_risk - d)), np.inf)
    return uniq, survival, np.cumsum(terms)


def _first_at_or_below(times: np.ndarray, curve: np.ndarray, level: float) -> float | None:
    """The first time at which ``curve`` (non-increasing) is ≤ ``level``, or None when it never is."""
    hit = np.flatnonzero(curve <= level + 1e-12)
    return float(times[hit[0]]) if len(hit) else None


def km_percentiles(times: np.ndarray | list[float], censored: np.ndarray | list[bool], *, scale: float = 1.0,
                   z: float = Z95) -> Percentiles:
    """Percentiles of right-censored waits by Kaplan–Meier, with Greenwood (Brookmeyer–Crowley style) intervals.

    The q-quantile is the first event time at which S(t) ≤ 1 − q. When S never falls that low (too
    many of the longest waits were censored), the quantile is only known to exceed the longest wait
    observed: that value is reported and its name listed in ``lower_bound``. ``max`` and ``mean`` are
    lower bounds as soon as anything is censored at or beyond the longest observed event.
    Without censoring use ``percentiles`` (numpy's interpolated definition, as everywhere else).
    """
    t = np.asarray(times, dtype=np.float64)
    c = np.asarray(censored, dtype=bool)
    ok = np.isfinite(t)
    t, c = t[ok] * scale, c[ok]
    if len(t) == 0:
        return Percentiles(n=0)
    n_censored = int(c.sum())
    longest = float(t.max())
    uniq, survival, greenwood = kaplan_meier(t, c)
    with np.errstate(invalid="ignore"):  # S = 0 after the last at-risk event: inf variance × 0
        se = survival * np.sqrt(greenwood)
    fields: dict[str, float] = {}
    bounds: list[str] = []
    intervals: dict[str, tuple[float, float]] = {}
    for name, q in QUANTILES.items():
        value = _first_at_or_below(uniq, survival, 1.0 - q) if len(uniq) else None
        if value is None:
            fields[name] = longest
            bounds.append(name)
            continue
        fields[name] = value
        low = _first_at_or_below(uniq, survival - z * se, 1.0 - q)
        high = _first_at_or_below(uniq, np.nan_to_num(survival + z * se, nan=1.0, posinf=1.0), 1.0 - q)
        if low is not None and high is not None:  # no upper end: no interval (bound judging fails closed)
            intervals[name] = (low, high)
    events_max = float(uniq[-1]) if len(uniq) else -math.inf
    if n_censored and float(t[c].max()) >= events_max:
        bounds += ["max"]
    if n_censored:
        bounds += ["mean"]
    return Percentiles(n=len(t), mean=float(t.mean()), max=longest, ci=intervals, censored=n_censored,
                       lower_bound=bounds, **fields)


def wait_percentiles(observed: np.ndarray, censored: np.ndarray) -> Percentiles:
    """Percentiles of waits: ``observed`` ended (a first token came), ``censored`` were cut (at least this long).

    Without censored waits this is ``percentiles`` (bootstrap intervals); with any, Kaplan–Meier.
    """
    obs = np.asarray(observed, dtype=np.float64)
    cen = np.asarray(censored, dtype=np.float64)
    obs, cen = obs[np.isfinite(obs)], cen[np.isfinite(cen)]
    if len(cen) == 0:
        return percentiles(obs)
    flags = np.concatenate([np.zeros(len(obs), dtype=bool), np.ones(len(cen), dtype=bool)])
    return km_percentiles(np.concatenate([obs, cen]), flags)


def cdf_points(values: np.ndarray, *, scale: float = 1.0, points: int = 101) -> list[float]:
    """The values at quantiles 0, 1/(points-1), …, 1 (empty when there are none)."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if len(arr) == 0:
        return []
    return [float(v) for v in np.quantile(arr * scale, np.linspace(0.0, 1.0, points))]


def jain_index(values: np.ndarray | list[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 = equal shares, 1/n = one takes all."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if len(arr) == 0:
        return None
    squares = float((arr * arr).sum())
    if squares == 0:
        return 1.0  # nobody got anything: equal, if bleak
    return float(arr.sum() ** 2 / (len(arr) * squares))


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of closed intervals [start, end], as sorted disjoint intervals (vectorised)."""
    if len(starts) == 0:
        return np.array([], dtype=np.float64), np.array([], dtype=np.float64)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.float64)[order]
    e = np.maximum(np.asarray(ends, dtype=np.float64)[order], s)
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    out_s = s[new]
    # reach never decreases: a merged interval ends at its last member's reach (no scatter-max per row)
    last = np.append(np.flatnonzero(new)[1:] - 1, len(s) - 1)
    out_e = np.maximum(np.maximum(np.zeros(len(out_s)), reach[last]), out_s)  # as the scatter from 0 did
    return out_s, out_e


def longest_gap(demand_starts: np.ndarray, demand_ends: np.ndarray, served_at: np.ndarray, *,
                served_sorted: bool = False) -> float | None:
    """Longest stretch with demand present and no service: max gap between service events inside demand.

    Demand intervals are merged; inside each, the boundaries and the service instants that fall in it
    cut it into pieces, and the longest piece is the starvation gap. None when there was no demand.
    ``served_sorted``: ``served_at`` is in order already (not sorted again).
    """
    s, e = merge_intervals(np.asarray(demand_starts), np.asarray(demand_ends))
    if len(s) == 0:
        return None
    served = np.asarray(served_at, dtype=np.float64)
    served = served if served_sorted else np.sort(served)
    served = served[np.isfinite(served)]
    which = np.searchsorted(s, served, side="right") - 1
    inside = (which >= 0) & (served <= e[np.clip(which, 0, None)]) if len(served) else np.zeros(0, dtype=bool)
    points, group = served[inside], which[inside]  # both in order: the intervals are disjoint and sorted
    # The pieces of interval i: start → its first service, service → next service, last service → end; an
    # interval without service is one piece. (One pass over sorted arrays: no sort of every boundary.)
    pieces = [e - s]
    if len(points):
        first = np.ones(len(points), dtype=bool)
        first[1:] = group[1:] != group[:-1]
        last = np.ones(len(points), dtype=bool)
        last[:-1] = first[1:]
        served_any = np.zeros(len(s), dtype=bool)
        served_any[group] = True
        pieces = [(e - s)[~served_any], points[first] - s[group[first]], e[group[last]] - points[last],
                  np.diff(points)[~first[1:]]]
    longest = max((float(p.max()) for p in pieces if len(p)), default=0.0)
    return longest


def merge_bucket_mask(mask: np.ndarray, max_gap: int = 1) -> list[tuple[int, int]]:
    """Runs of True buckets as [first, last] index pairs, joining runs separated by ≤ ``max_gap`` buckets."""
    idx = np.flatnonzero(np.asarray(mask, dtype=bool))
    if len(idx) == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) > max_gap + 1)
    firsts = np.concatenate(([idx[0]], idx[breaks + 1]))
    lasts = np.concatenate((idx[breaks], [idx[-1]]))
    return [(int(a), int(b)) for a, b in zip(firsts, lasts, strict=True)]


# Above this many trials the exact binomial tail is replaced by the normal approximation (continuity
# corrected): the exact sum costs O(n) big integers, and at this size the two agree to < 1e-3.
EXACT_BINOMIAL_MAX = 5000


def binomial_two_sided(k: int, n: int) -> float | None:
    """Exact two-sided p of ``k`` heads in ``n`` fair coin flips (sign test, exact McNemar); None at n = 0."""
    k, n = int(k), int(n)
    if n <= 0:
        return None
    low = min(k, n - k)
    if n > EXACT_BINOMIAL_MAX:
        z = (abs(k - n / 2) - 0.5) / math.sqrt(n / 4)
        return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))
    tail = sum(math.comb(n, i) for i in range(low + 1)) / 2**n
    return min(1.0, 2 * tail)


def sign_test(differences: np.ndarray | list[float]) -> tuple[int, int, int, float | None]:
    """Paired sign test: (pairs below 0, above 0, ties, exact two-sided p without the ties)."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[np.isfinite(d)]
    below, above = int((d < 0).sum()), int((d > 0).sum())
    return below, above, len(d) - below - above, binomial_two_sided(below, below + above)


def mcnemar_exact(only_first: int, only_second: int) -> float | None:
    """Exact McNemar test on a paired yes/no outcome: the discordant pairs split like a fair coin?"""
    return binomial_two_sided(only_first, only_first + only_second)
