"""The priority control: pair each sampled request with its equal-priority twin and test the difference.

A twin (record ``control: true``, ``twin_of: <logical_id>``) is a copy of a tier's request sent at
the same moment at a neutral priority (loadgen/control.py). The twins count in no tier figure; here
each tier's requests are compared with their own twins, pair by pair:

* TTFT (from send) and queue wait (first token from the intended send), on the pairs where both got a
  first token: the exact two-sided sign test on the paired differences (no scipy; distribution-free),
  and the median of the pairs' ratios (tier / twin − 1).
* Not served, on every pair whose both halves were sent: the exact McNemar test on the discordant pairs
  and the difference of the two rates in points.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rushhour.audit import text
from rushhour.audit.fold import NS_PER_MS, UNJUDGED, isin
from rushhour.audit.stats import mcnemar_exact, sign_test
from rushhour.audit.summary import DropEffect, PairedEffect, PriorityEffect

ALPHA = 0.05


def is_twin(attempts: pd.DataFrame) -> np.ndarray:
    """Attempts that are control twins (older records have no ``control`` column: none are)."""
    if "control" not in attempts.columns:
        return np.zeros(len(attempts), dtype=bool)
    return attempts["control"].fillna(False).to_numpy(dtype=bool)


def pair(own: pd.DataFrame, twins: pd.DataFrame, twin_of: pd.DataFrame) -> pd.DataFrame:
    """Logical requests joined with their twins (suffixes ``_t`` and ``_c``); both halves sent.

    ``own`` and ``twins`` are folded logical requests; ``twin_of`` maps a twin's ``logical_id`` to its
    original's (one row per twin attempt is fine).
    """
    cols = ["logical_id", "cls", "unserved", "ttft_ns", "ttft_intended_ns"]
    link = twin_of[["logical_id", "twin_of"]].astype(str).drop_duplicates("logical_id")
    twin_rows = twins[[c for c in cols if c in twins.columns]].assign(logical_id=lambda f: f["logical_id"].astype(str))
    twin_rows = twin_rows.merge(link, on="logical_id", how="inner").drop(columns="logical_id")
    own_rows = own[[c for c in cols if c in own.columns]].assign(logical_id=lambda f: f["logical_id"].astype(str))
    pairs = own_rows.merge(twin_rows, left_on="logical_id", right_on="twin_of", suffixes=("_t", "_c"))
    sent = ~isin(pairs["cls_t"].astype(str), UNJUDGED) & ~isin(pairs["cls_c"].astype(str), UNJUDGED)
    return pairs[sent].reset_index(drop=True)


def paired_effect(tier_values: np.ndarray, control_values: np.ndarray, alpha: float = ALPHA) -> PairedEffect:
    """Sign test and median change on paired latencies (ns); pairs with a missing value are left out."""
    t = np.asarray(tier_values, dtype=np.float64)
    c = np.asarray(control_values, dtype=np.float64)
    both = np.isfinite(t) & np.isfinite(c)
    t, c = t[both], c[both]
    if len(t) == 0:
        return PairedEffect(n=0)
    lower, higher, ties, p = sign_test(t - c)
    tier_p50, control_p50 = float(np.median(t)) / NS_PER_MS, float(np.median(c)) / NS_PER_MS
    # the median of the pairs' ratios, not the ratio of the two medians: it moves with the sign test
    # (above 1 exactly when most pairs are slower than their twins), so "no effect" never reads "+34 %"
    # (on the log scale, so a pair 2x slower and a pair 2x faster cancel out)
    positive = (c > 0) & (t > 0)
    change = float(np.exp(np.median(np.log(t[positive] / c[positive])))) - 1 if positive.any() else None
    return PairedEffect(n=len(t), tier_p50_ms=tier_p50, control_p50_ms=control_p50, change=change, lower=lower,
                        higher=higher, ties=ties, p_value=p, significant=p is not None and p < alpha)


def drop_effect(tier_unserved: np.ndarray, control_unserved: np.ndarray, alpha: float = ALPHA) -> DropEffect:
    """McNemar on paired 'not served' flags."""
    t = np.asarray(tier_unserved, dtype=bool)
    c = np.asarray(control_unserved, dtype=bool)
    n = len(t)
    if n == 0:
        return DropEffect(n=0)
    only_t, only_c = int((t & ~c).sum()), int((~t & c).sum())
    p = mcnemar_exact(only_t, only_c)
    return DropEffect(n=n, tier_unserved=int(t.sum()), control_unserved=int(c.sum()), only_tier=only_t,
                      only_control=only_c, difference=float(t.mean() - c.mean()), p_value=p,
                      significant=p is not None and p < alpha)


def _p(p: float | None) -> str:
    if p is None:
        return "p: –"
    return text.p_clause(p)


def message(tier: str, effect: PriorityEffect) -> str:
    """One sentence: the significant effects, or 'no measurable effect' with the figures."""
    parts = []
    ttft, wait, drops = effect.ttft, effect.wait, effect.drops
    if ttft.n:
        parts.append(("TTFT " + text.signed_pct(ttft.change) + f" ({_p(ttft.p_value)})", ttft.significant))
    if wait.n:
        parts.append(("wait " + text.signed_pct(wait.change) + f" ({_p(wait.p_value)})", wait.significant))
    if drops.n and drops.p_value is not None:  # without a discordant pair there is nothing to test
        parts.append(("not served " + text.signed_points(drops.difference) + f" ({_p(drops.p_value)})",
                      drops.significant))
    pairs = f"n = {effect.pairs} pairs"
    if not parts:
        return f"{tier}: no pair of a request and its equal-priority twin was sent ({pairs})"
    if effect.effect:
        shown = "; ".join(p for p, sig in parts if sig)
        return f"{tier}: {shown} vs equal-priority control, {pairs}"
    return f"{tier}: no measurable effect of priority: " + "; ".join(p for p, _ in parts) + f", {pairs}"


def priority_effect(tier: str, pairs: pd.DataFrame, control: str, alpha: float = ALPHA) -> PriorityEffect:
    """The tier's effect against its twins from ``pair``'s frame."""
    served = (~pairs["unserved_t"].to_numpy(dtype=bool)) & (~pairs["unserved_c"].to_numpy(dtype=bool))
    ttft = paired_effect(pairs["ttft_ns_t"].to_numpy(dtype=np.float64)[served],
                         pairs["ttft_ns_c"].to_numpy(dtype=np.float64)[served], alpha)
    wait = paired_effect(pairs["ttft_intended_ns_t"].to_numpy(dtype=np.float64)[served],
                         pairs["ttft_intended_ns_c"].to_numpy(dtype=np.float64)[served], alpha)
    drops = drop_effect(pairs["unserved_t"].to_numpy(dtype=bool), pairs["unserved_c"].to_numpy(dtype=bool), alpha)
    effect = PriorityEffect(pairs=len(pairs), control=control, alpha=alpha, ttft=ttft, wait=wait, drops=drops,
                            effect=ttft.significant or wait.significant or drops.significant, message="")
    effect.message = message(tier, effect)
    return effect


def describe_control(profile_wire: dict[str, object], neutral: int | None, objective: str | None) -> str:
    """What the twins carried, in words (from the stack profile's wire facts)."""
    bits = []
    if profile_wire.get("priority_body"):
        bits.append(f"body priority {neutral} in rushhour's polarity (sent {profile_wire['priority_body']})")
    if profile_wire.get("priority_extra_body"):
        bits.append(f"extra_body.priority {neutral} in rushhour's polarity "
                    f"(sent {profile_wire['priority_extra_body']})")
    for header in ("objective_header", "priority_header"):
        name = profile_wire.get(header)
        if name:
            bits.append(f"{name}: {objective}" if objective else f"no {name} (the stack's default priority)")
    if profile_wire.get("service_tier"):
        bits.append("no service_tier")
    return "; ".join(bits) or "the tier's own request without any priority field (this stack has none)"
