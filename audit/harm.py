"""Did the generator's trouble move a recorded time? Harm, not symptom: how far each first token may be off.

A late event loop is a symptom. It harms a measurement only when a time was taken after the stall instead
of when the bytes arrived: a first token stamped in user space (recv's return) carries the loop's lag in
effect at that moment; one stamped by the kernel (SO_TIMESTAMPNS, until the first token) does not, unless
the read that brought it also brought later tokens, because the kernel's stamp of a TCP read is that of its
last segment: the first token is then stamped at a later token's arrival. Pure functions on arrays.
"""

from __future__ import annotations

import numpy as np

from rushhour.records.record import FIRST_TOKEN_KERNEL

NS_PER_MS = 1_000_000.0
# A first token more than this late is a moved measurement: TTFT SLOs sit at hundreds of ms to seconds, so
# 10 ms keeps a claim within ~1 % of a 1 s bound, and it is above the few ms the clocks themselves disagree by
# (client stamp vs the server's own, on loopback: ≤ 1 ms in quiet runs).
FIRST_TOKEN_TOLERANCE_MS = 10.0
MOVED_SHARE = 0.01  # more than this share of first tokens moved makes the run invalid (a p99 claim) …
MOVED_MIN = 3  # … once at least this many were (the same shape as the schedule-lag rule)
HEALTH_WINDOW_NS = 1_500_000_000  # a health sample covers the second before it (+ half a tick's slack)


def loop_lag_at(times_ns: np.ndarray, health_ts_ns: np.ndarray, health_lag_ns: np.ndarray) -> np.ndarray:
    """The loop lag in effect at each time: the worst lag of any process's health sample taken within
    HEALTH_WINDOW_NS after it (a stall is measured when it ends, by the timer it held back). NaN: no sample."""
    out = np.full(len(times_ns), np.nan)
    ok = np.isfinite(health_ts_ns) & np.isfinite(health_lag_ns)
    ts, lag = health_ts_ns[ok], health_lag_ns[ok]
    if not len(ts) or not len(times_ns):
        return out
    order = np.argsort(ts, kind="stable")
    ts, lag = ts[order], lag[order]
    finite = np.isfinite(times_ns)
    t = times_ns[finite]
    lo = np.searchsorted(ts, t, "left")
    hi = np.searchsorted(ts, t + HEALTH_WINDOW_NS, "right")
    # a running maximum over windows: few samples per window (one per process and second), so a short loop
    best = np.full(len(t), np.nan)
    width = int((hi - lo).max()) if len(t) else 0
    for k in range(width):
        idx = lo + k
        inside = idx < hi
        vals = np.where(inside, lag[np.minimum(idx, len(lag) - 1)], np.nan)
        best = np.fmax(best, vals)
    out[finite] = best
    return out


def first_token_error_ns(clock: np.ndarray, batch: np.ndarray, tokens: np.ndarray, itl_mean_ns: np.ndarray,
                         first_ns: np.ndarray, lag_ns: np.ndarray) -> np.ndarray:
    """How late each first token's recorded time may be (ns; NaN where there is no first token).

    Kernel stamp, read alone (batch ≤ 1): 0, whatever the loop did. Kernel stamp of a read that held ``batch``
    tokens: the stamp is the last one's, so it is late by the span of the batch, (batch − 1) inter-token gaps
    as the stream went on after it (its mean gap counts the batch's zero gaps: (tokens − 1) · mean spread over
    the tokens − batch gaps after it), or the loop lag in effect when no gap was seen after it. User-space
    stamp (or none said): the loop lag in effect when it was read.
    """
    has = np.isfinite(first_ns)
    kernel = clock == FIRST_TOKEN_KERNEL
    b = np.nan_to_num(batch.astype(np.float64), nan=1.0)
    n = np.nan_to_num(tokens.astype(np.float64), nan=0.0)
    after = n - b  # gaps seen after the batch
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.where(after > 0, itl_mean_ns * (n - 1) / np.where(after > 0, after, 1.0), np.nan)
    span = np.where(np.isfinite(gap), (b - 1) * gap, lag_ns)
    lag = np.nan_to_num(lag_ns, nan=0.0)
    err = np.where(kernel, np.where(b <= 1, 0.0, np.nan_to_num(span, nan=0.0)), lag)
    return np.where(has, np.maximum(err, 0.0), np.nan)


def moved_first_tokens(error_ns: np.ndarray, tolerance_ms: float = FIRST_TOKEN_TOLERANCE_MS) -> tuple[bool, int, int]:
    """(too many?, moved, judged): first tokens whose possible error passes the tolerance. Pure."""
    error_ns = error_ns[np.isfinite(error_ns)]
    moved = int((error_ns > tolerance_ms * NS_PER_MS).sum())
    return moved >= MOVED_MIN and moved > MOVED_SHARE * len(error_ns), moved, len(error_ns)
