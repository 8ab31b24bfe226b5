"""Fairness inside a tier, starvation, priority inversions between tiers, and floors for the lowest."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rushhour.audit import text
from rushhour.audit.fold import NS_PER_MS, NS_PER_S, eq
from rushhour.audit.stats import jain_index, longest_gap, wilson
from rushhour.audit.summary import Finding, Floor, Rate
from rushhour.audit.timeline import Grid

INVERSION_P50_MARGIN = 0.10  # a lower tier must be >10 % faster at p50 to count as an inversion
INVERSION_MIN_SERVED = 5  # per tier and window, for the p50 comparison
MAX_EXAMPLES = 5


def tenant_jain(goodput_ratio: list[float]) -> float | None:
    """Jain's index over tenants' goodput ratio (served in SLO / judged): demand-neutral fairness."""
    return jain_index(goodput_ratio) if len(goodput_ratio) > 1 else (1.0 if goodput_ratio else None)


def starvation_gap_s(attempts: pd.DataFrame) -> float | None:
    """Longest time (s) a tier had demand (requests arriving or waiting) and no request got service.

    A first token is service. Demand of an attempt lasts from its intended send time until its first
    token; an attempt that got none (refused, timed out, not sent, cancelled) leaves its user wanting
    service until the tier's next first token at or after the attempt's end (which is no later than
    its logical request being served), or, when the tier got no more service, until the last thing
    seen of the tier. So a 60 s queue wait during which the tier got nothing shows as 60 s, and so do
    60 s of instant rejections.
    """
    if len(attempts) == 0:
        return None
    start = attempts["intended_ns"].to_numpy(dtype=np.float64)
    first = attempts["first_token_ns"].to_numpy(dtype=np.float64)
    t_end = attempts["t_end_ns"].to_numpy(dtype=np.float64)
    got = np.isfinite(first)
    service = np.sort(first[got])
    seen = np.concatenate([t_end[np.isfinite(t_end)], service])
    last_seen = float(seen.max()) if len(seen) else np.nan
    later = np.fmax(t_end, last_seen)  # no more service: demand lasts until the tier was last seen
    if len(service):
        nxt = np.searchsorted(service, np.nan_to_num(t_end, nan=np.inf), side="left")
        has_next = nxt < len(service)
        later = np.where(has_next, service[np.minimum(nxt, len(service) - 1)], later)
    end = np.where(got, first, np.where(np.isfinite(t_end), later, np.nan))
    ok = np.isfinite(start) & np.isfinite(end)
    gap = longest_gap(start[ok], end[ok], service, served_sorted=True)  # sorted above
    return None if gap is None else gap / NS_PER_S


@dataclass
class InversionPair:
    """Evidence that ``low`` was favoured over ``high`` during saturation."""

    high: str
    low: str
    buckets: list[float] = field(default_factory=list)  # bucket starts (s): low served while high dropped
    served_low: int = 0
    dropped_high: int = 0
    p50_windows: list[dict[str, float]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.buckets) + len(self.p50_windows)


def find_inversions(
    attempts: pd.DataFrame, priorities: dict[str, int], windows: list[tuple[float, float]], grid: Grid
) -> list[InversionPair]:
    """Inversions inside saturation windows: per bucket (low served while high dropped) and per window (p50)."""
    if not windows or len(attempts) == 0:
        return []
    present = set(pd.unique(attempts["tier"].dropna()))
    tiers = sorted((t for t in priorities if t in present), key=lambda t: -priorities[t])
    masks = {t: eq(attempts["tier"], t) for t in tiers}
    sat = np.zeros(grid.count, dtype=bool)
    for start, end in windows:
        sat[int(start // grid.bucket_s): int(np.ceil(end / grid.bucket_s))] = True
    first_idx = grid.index(attempts["first_token_ns"])
    end_idx = grid.index(attempts["t_end_ns"])
    got_token = first_idx >= 0
    dropped = attempts["policy_drop"].to_numpy()  # turned away by policy (a crash is not an inversion)
    served = attempts["served"].to_numpy()
    sent_s = attempts["intended_ns"].to_numpy(dtype=np.float64) / NS_PER_S
    ttft_ms = attempts["ttft_ns"].to_numpy(dtype=np.float64) / NS_PER_MS
    service = {t: np.bincount(first_idx[masks[t] & got_token], minlength=grid.count) for t in tiers}
    drops = {t: np.bincount(end_idx[masks[t] & dropped & (end_idx >= 0)], minlength=grid.count) for t in tiers}
    out: list[InversionPair] = []
    for i, high in enumerate(tiers):
        for low in tiers[i + 1:]:
            if priorities[low] >= priorities[high]:
                continue
            pair = InversionPair(high, low)
            both = sat & (service[low] > 0) & (drops[high] > 0)
            pair.buckets = [round(b * grid.bucket_s, 6) for b in np.flatnonzero(both)]
            pair.served_low = int(service[low][both].sum())
            pair.dropped_high = int(drops[high][both].sum())
            for start, end in windows:
                in_w = (sent_s >= start) & (sent_s < end) & served & np.isfinite(ttft_ms)
                hi_v, lo_v = ttft_ms[in_w & masks[high]], ttft_ms[in_w & masks[low]]
                if len(hi_v) < INVERSION_MIN_SERVED or len(lo_v) < INVERSION_MIN_SERVED:
                    continue
                hi_p50, lo_p50 = float(np.median(hi_v)), float(np.median(lo_v))
                if lo_p50 < hi_p50 * (1 - INVERSION_P50_MARGIN):
                    pair.p50_windows.append({"start_s": start, "end_s": end, "high_p50_ms": hi_p50,
                                             "low_p50_ms": lo_p50})
            if pair.count:
                out.append(pair)
    return out


def inversion_findings(pairs: list[InversionPair]) -> list[Finding]:
    """One ``inversion`` finding per (higher, lower) tier pair, with counts and a few examples."""
    findings = []
    for pair in pairs:
        parts = []
        if pair.buckets:
            parts.append(f"{pair.low} got service in {len(pair.buckets)} saturated bucket(s) while {pair.high} "
                         f"was dropped ({pair.served_low} {pair.low} starts, {pair.dropped_high} {pair.high} drops)")
        if pair.p50_windows:
            w = pair.p50_windows[0]
            parts.append(f"{pair.low} was served faster at p50 than {pair.high} in {len(pair.p50_windows)} "
                         f"window(s) (e.g. {text.ms(w['low_p50_ms'])} vs {text.ms(w['high_p50_ms'])})")
        findings.append(Finding(
            kind="inversion", severity="warning", tier=pair.high, message="; ".join(parts),
            data={"high": pair.high, "low": pair.low, "count": pair.count, "buckets": len(pair.buckets),
                  "served_low": pair.served_low, "dropped_high": pair.dropped_high,
                  "p50_windows": len(pair.p50_windows),
                  "examples": {"buckets_s": pair.buckets[:MAX_EXAMPLES],
                               "windows": pair.p50_windows[:MAX_EXAMPLES]}},
        ))
    return findings


def floor_share(tier_good: int, total_good: int, minimum: float | None, *, saturated: bool = False
                ) -> tuple[Floor, Rate]:
    """A tier's share of all goodput during saturation, judged against ``minimum`` when set.

    ``saturated``: whether the run had any saturation window. Without one the floor is not judged
    (share None); with windows but no goodput in them at all, every tier's share is 0.
    """
    rate = wilson(tier_good, total_good)
    share = rate.value if rate.value is not None or not saturated else 0.0
    passed = None if minimum is None or share is None else share >= minimum
    return Floor(share=share, minimum=minimum, passed=passed), rate
