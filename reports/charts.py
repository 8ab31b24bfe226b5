"""Chart data prep: downsampled, JSON-ready series for the HTML report's uPlot charts and static SVG."""

from __future__ import annotations

import math
from typing import Any

from rushhour.audit.summary import POLICY_DROP_CLASSES, Summary, TierSeries, TierSummary
from rushhour.reports import fmt

# Points per time series in the HTML; a 24 h run at 1 s buckets is merged to this many.
MAX_POINTS = 1500


def _factor(n: int, max_points: int) -> int:
    """How many buckets to merge so that ``n`` buckets fit in ``max_points``."""
    return max(1, math.ceil(n / max_points))


def _sum(values: list[int] | list[float], k: int) -> list[float]:
    """Sum consecutive groups of ``k``."""
    return [float(sum(values[i : i + k])) for i in range(0, len(values), k)]


def _max(values: list[float | None], k: int) -> list[float | None]:
    """Max of consecutive groups of ``k``, ignoring gaps."""
    out: list[float | None] = []
    for i in range(0, len(values), k):
        group = [v for v in values[i : i + k] if v is not None]
        out.append(max(group) if group else None)
    return out


def _mean(values: list[float | None], k: int) -> list[float | None]:
    """Mean of consecutive groups of ``k``, ignoring gaps."""
    out: list[float | None] = []
    for i in range(0, len(values), k):
        group = [v for v in values[i : i + k] if v is not None]
        out.append(round(sum(group) / len(group), 3) if group else None)
    return out


def _per_s(values: list[float], seconds: float) -> list[float]:
    """Counts per merged bucket as a rate per second."""
    return [round(v / seconds, 3) if seconds > 0 else v for v in values]


def _total(series: TierSeries, n: int, classes: tuple[str, ...] | None = None) -> list[int]:
    """Attempts not served per bucket, of ``classes`` (None = every unserved class)."""
    total = [0] * n
    for name, values in series.unserved.items():
        if classes is None or name in classes:
            for i, v in enumerate(values[:n]):
                total[i] += v
    return total


def timeline_data(summary: Summary, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """Time series for every tier, merged to at most ``max_points`` points (never dropping a tier)."""
    tl = summary.timeline
    n = len(tl.t)
    k = _factor(n, max_points)
    bucket = tl.bucket_s * k
    t = [tl.t[i] for i in range(0, n, k)]
    tiers: dict[str, Any] = {}
    for tier in summary.tiers:
        s = tl.tiers.get(tier.name)
        if s is None:
            tiers[tier.name] = None
            continue
        # one visible series per unserved class the tier had (unfinished and unclassified included)
        totals = {c: sum(v[:n]) for c, v in s.unserved.items()}
        classes = [c for c in fmt.ordered_classes(totals) if totals[c]]
        tiers[tier.name] = {
            "offered": _per_s(_sum(s.offered[:n], k), bucket),
            "served": _per_s(_sum(s.served[:n], k), bucket),
            "not_served": _per_s(_sum(_total(s, n), k), bucket),
            "policy": _per_s(_sum(_total(s, n, POLICY_DROP_CLASSES), k), bucket),
            "by_class": [{"cls": c, "label": fmt.class_label(c), "colour": fmt.class_colour(c),
                          "values": _per_s(_sum(s.unserved[c][:n], k), bucket)} for c in classes],
            "ttft_p50_ms": _mean(s.ttft_p50_ms[:n], k),
            "ttft_p99_ms": _max(s.ttft_p99_ms[:n], k),
        }
    by_priority = {str(t.priority): t for t in summary.tiers}
    colours = fmt.tier_colours(summary)
    server: dict[str, list[dict[str, Any]]] = {}
    for metric, labels in tl.server.items():
        rows = []
        for i, (label, values) in enumerate(labels.items()):
            band = by_priority.get(label)
            rows.append(
                {
                    "label": f"{band.name} (priority {label})" if band else label,
                    "colour": colours[band.name]
                    if band
                    else fmt.TIER_PALETTE[(len(colours) + i) % len(fmt.TIER_PALETTE)],
                    "values": _mean(values[:n], k),
                    "order": summary.tiers.index(band) if band else len(colours) + i,
                }
            )
        server[metric] = sorted(rows, key=lambda r: r["order"])
    return {"t": t, "bucket_s": bucket, "merged": k, "tiers": tiers, "server": server}


def cdf_data(summary: Summary) -> dict[str, Any]:
    """TTFT CDF per tier from send and from intended send, as (ms, quantile) pairs."""
    out: dict[str, Any] = {}
    for tier in summary.tiers:
        curves: dict[str, list[list[float]]] = {}
        for key in ("from_send", "from_intended"):
            values = tier.ttft_cdf_ms.get(key) or []
            if len(values) >= 2:
                step = 1 / (len(values) - 1)
                curves[key] = [[round(max(v, 0.01), 3), round(i * step, 4)] for i, v in enumerate(values)]
        out[tier.name] = curves
    return out


def chart_payload(summary: Summary, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """Everything the report's JavaScript draws, in one JSON-ready dict."""
    start = fmt.anchor(summary)
    breaker = []
    for change in summary.timeline.breaker:
        t_s = change.get("t_s", change.get("ts_s", change.get("t")))
        if isinstance(t_s, (int, float)):
            breaker.append(
                {"t": float(t_s), "route": str(change.get("route", "")), "state": str(change.get("state", ""))}
            )
    return {
        "anchor_epoch_s": start.timestamp() if start else None,
        "duration_s": summary.run.duration_s,
        "tiers": [t.name for t in summary.tiers],
        "colours": fmt.tier_colours(summary),
        "windows": [[w.start_s, w.end_s] for w in summary.windows],
        "excluded": [[a, b] for a, b in summary.measurement.excluded_spans],
        "outages": [{"start": o.start_s, "end": o.end_s, "name": o.name, "route": o.route} for o in summary.outages],
        "phases": [
            {"name": str(p.get("name", "")), "start": p.get("start_s"), "end": p.get("end_s")}
            for p in summary.run.phases
        ],
        "timeline": timeline_data(summary, max_points),
        "cdf": cdf_data(summary),
        "breaker": breaker,
    }


# --------------------------------------------------------------------------- static SVG bars


def outcome_bars(summary: Summary) -> list[dict[str, Any]]:
    """Per tier, stacked-bar segments (class, count, share, x offset) over its logical requests."""
    rows = []
    for tier in summary.tiers:
        total = sum(tier.by_class.values())
        segments = []
        x = 0.0
        for cls in fmt.ordered_classes(tier.by_class):
            value = tier.by_class[cls]
            if value <= 0 or total == 0:
                continue
            share = value / total
            segments.append(
                {
                    "cls": cls,
                    "label": fmt.class_label(cls),
                    "count": value,
                    "share": share,
                    "x": x,
                    "colour": fmt.class_colour(cls),
                }
            )
            x += share
        rows.append({"tier": tier.name, "total": total, "segments": segments})
    return rows


def breaker_strips(summary: Summary) -> list[dict[str, Any]]:
    """Per route, state intervals (start, end, state) over the run for a static SVG strip."""
    end = max(summary.run.duration_s, summary.timeline.t[-1] + summary.timeline.bucket_s if summary.timeline.t else 0.0)
    by_route: dict[str, list[tuple[float, str]]] = {}
    for change in summary.timeline.breaker:
        t_s = change.get("t_s", change.get("ts_s", change.get("t")))
        if isinstance(t_s, (int, float)):
            by_route.setdefault(str(change.get("route", "?")), []).append((float(t_s), str(change.get("state"))))
    strips = []
    for route, changes in sorted(by_route.items()):
        changes.sort()
        spans = []
        state, since = "closed", 0.0
        for t_s, new in changes:
            if t_s > since:
                spans.append({"start": since, "end": t_s, "state": state})
            state, since = new, t_s
        if end > since:
            spans.append({"start": since, "end": end, "state": state})
        strips.append({"route": route, "end": end or 1.0, "spans": spans})
    return strips


def tier_has_timeline(summary: Summary, tier: TierSummary) -> bool:
    """True when the timeline carries a series for this tier."""
    return tier.name in summary.timeline.tiers


def nice_ticks(top: float, target: int = 4) -> list[float]:
    """Axis ticks from 0 with a round step (1, 2, 2.5 or 5 × 10^k), the last at or above ``top``."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag * (1 + 1e-9))
    count = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(count + 1)]


def tick_label(value: float, ticks: list[float]) -> str:
    """A tick's text with as many decimals as the step needs (0.25 → "0.25", 2.5 → "2.5", 20 → "20")."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > 1e-9 * max(1.0, step):
        decimals += 1
    return f"{value:,.{decimals}f}"

