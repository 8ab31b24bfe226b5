"""The priority control in the reports: one row and one sentence per tier that had twins."""

from __future__ import annotations

from rushhour.audit import text
from rushhour.audit.summary import PairedEffect, PriorityEffect, Summary


def _p(p: float | None) -> str:
    if p is None:
        return text.DASH
    return text.p_value(p)


def _latency(e: PairedEffect) -> dict[str, str]:
    return {"n": str(e.n), "tier": text.ms(e.tier_p50_ms), "control": text.ms(e.control_p50_ms),
            "change": text.signed_pct(e.change), "p": _p(e.p_value), "significant": "yes" if e.significant else "no"}


def effects(summary: Summary) -> list[tuple[str, PriorityEffect]]:
    """The tiers that had a control, most urgent first."""
    return [(t.name, t.priority_effect) for t in summary.tiers if t.priority_effect is not None]


def lines(summary: Summary) -> list[str]:
    """One sentence per tier: the significant effects, or 'no measurable effect' with the figures."""
    return [effect.message for _, effect in effects(summary)]


def rows(summary: Summary) -> list[dict[str, object]]:
    """Table rows for the HTML and Markdown reports."""
    out: list[dict[str, object]] = []
    for name, e in effects(summary):
        d = e.drops
        out.append({
            "tier": name, "pairs": str(e.pairs), "control": e.control, "effect": e.effect,
            "ttft": _latency(e.ttft), "wait": _latency(e.wait),
            "drops": {"tier": text.pct(d.tier_unserved / d.n) if d.n else text.DASH,
                      "control": text.pct(d.control_unserved / d.n) if d.n else text.DASH,
                      "change": text.signed_points(d.difference), "p": _p(d.p_value),
                      "significant": "yes" if d.significant else "no"},
            "message": e.message,
        })
    return out
