"""Number formatting, wall-clock times and the fixed colour palettes shared by every report.

Durations, percentages and ratios come from ``audit/text.py`` (the audit's sentences use the same
functions), so a value reads the same in a finding and in a table.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rushhour.audit.judged import JUDGED_CHECK, TierState
from rushhour.audit.summary import (
    OUTCOME_CLASSES,
    POLICY_DROP_CLASSES,
    UNSERVED_CLASSES,
    Latency,
    Percentiles,
    Rate,
    Summary,
    Verdict,
)
from rushhour.audit.text import ms, p_value, pct, times

# Okabe–Ito based, colour-blind safe; assigned by tier order (most urgent first), never by name.
TIER_PALETTE = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#CC79A7",  # reddish purple
    "#009E73",  # bluish green
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#8C6D31",  # brown
    "#666666",  # grey
)

CLASS_COLOURS = {
    "served": "#4C9F70",
    "queue_full": "#D62728",
    "queue_timeout": "#FF7F0E",
    "shed": "#9467BD",
    "preempted": "#8C564B",
    "rate_limited": "#E377C2",
    "overloaded": "#7F1D1D",
    "failed": "#525252",
    "timeout": "#BCBD22",
    "transport": "#17BECF",
    "cancelled": "#AAAAAA",
    "abandoned": "#F2B134",
    "unfinished": "#6B4C9A",
    "unclassified": "#000000",
    "not_sent": "#C7C7C7",
}

CLASS_LABELS = {
    "served": "served",
    "queue_full": "rejected: queue full",
    "queue_timeout": "timed out in queue",
    "shed": "shed",
    "preempted": "preempted",
    "rate_limited": "rate limited",
    "overloaded": "overloaded",
    "failed": "failed",
    "timeout": "client timeout",
    "transport": "transport error",
    "cancelled": "cancelled",
    "abandoned": "abandoned by the user",
    "unfinished": "unfinished at run end",
    "unclassified": "unclassified (no rule)",
    "not_sent": "not sent",
}

# ms, pct, times and p_value are re-exported: the one formatting of durations, shares, ratios, p-values
__all__ = ["CLASS_COLOURS", "CLASS_LABELS", "OUTCOME_CLASSES", "POLICY_DROP_CLASSES", "TIER_PALETTE",
           "UNSERVED_CLASSES", "ms", "p_value", "pct", "times"]


def tier_colours(summary: Summary) -> dict[str, str]:
    """Map each tier to its fixed colour by position in ``summary.tiers``."""
    return {t.name: TIER_PALETTE[i % len(TIER_PALETTE)] for i, t in enumerate(summary.tiers)}


def class_colour(name: str) -> str:
    """Colour of an outcome class (unknown classes are grey)."""
    return CLASS_COLOURS.get(name, "#999999")


def class_label(name: str) -> str:
    """Human label of an outcome class."""
    return CLASS_LABELS.get(name, name.replace("_", " "))


def ordered_classes(counts: dict[str, int]) -> list[str]:
    """Classes in taxonomy order, then any unknown ones alphabetically."""
    known = [c for c in OUTCOME_CLASSES if c in counts]
    return known + sorted(c for c in counts if c not in OUTCOME_CLASSES)


def unserved_count(by_class: dict[str, int]) -> int:
    """Requests sent and not served (every class but served and not_sent): the headline."""
    return sum(by_class.get(c, 0) for c in UNSERVED_CLASSES)


def policy_drop_count(by_class: dict[str, int]) -> int:
    """Requests turned away by the stack's policy (queue full, shed, …): a part of ``unserved_count``."""
    return sum(by_class.get(c, 0) for c in POLICY_DROP_CLASSES)


def secs(value: float | None) -> str:
    """A duration given in seconds."""
    return "–" if value is None else ms(value * 1000)


def rate_ci(rate: Rate | None) -> str:
    """'31 % [28–34 %]' for a Wilson rate."""
    if rate is None or rate.value is None:
        return "–"
    if rate.low is None or rate.high is None:
        return pct(rate.value)
    return f"{pct(rate.value)} [{pct(rate.low).removesuffix(' %')}–{pct(rate.high)}]"


def pctl(p: Percentiles, key: str) -> float | None:
    """One percentile by name ('p50', 'p99', 'max', 'mean')."""
    value = getattr(p, key, None)
    return value if isinstance(value, (int, float)) else None


def pctl_text(p: Percentiles, key: str) -> str:
    """One percentile as text; '≥ 12.2 s' when censoring makes it only a lower bound."""
    value = pctl(p, key)
    if value is None:
        return "–"
    return f"≥ {ms(value)}" if key in p.lower_bound else ms(value)


def decode_line(lat: Latency) -> str:
    """A tier's decode speed: per-request TPOT beside pooled ITL (every token gap), or why ITL is not there."""
    tpot = f"TPOT p50 {pctl_text(lat.tpot_ms, 'p50')}, p99 {pctl_text(lat.tpot_ms, 'p99')} (per request)"
    if lat.itl_ms is None:
        return f"{tpot}; pooled ITL not measured (the records hold no per-token times: record_token_times off)"
    if lat.itl_ms.n == 0:
        return f"{tpot}; pooled ITL: no served stream with two tokens or more"
    return (f"{tpot}; ITL p50 {pctl_text(lat.itl_ms, 'p50')}, p99 {pctl_text(lat.itl_ms, 'p99')} "
            f"(pooled, {count(lat.itl_ms.n)} gaps)")


def speed_change(drift: float) -> str:
    """A calibration's ``speed_drift`` in words: 0.2 → "20% slower", -0.2 → "20% faster"."""
    return f"{abs(drift):.0%} {'slower' if drift > 0 else 'faster'}"


def count(value: int | float | None) -> str:
    """An integer with thin thousands separators."""
    if value is None:
        return "–"
    return f"{int(value):,}".replace(",", "\u202f")


def anchor(summary: Summary) -> datetime | None:
    """The run's wall-clock start (UTC), or None when unparsable."""
    try:
        start = datetime.fromisoformat(summary.run.started_at.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return start if start.tzinfo else start.replace(tzinfo=UTC)


def clock(summary: Summary, t_s: float) -> str:
    """Seconds from the anchor as a UTC wall-clock 'HH:MM:SS' (or '+t s' without an anchor)."""
    start = anchor(summary)
    if start is None:
        return f"+{t_s:.0f} s"
    return (start + timedelta(seconds=t_s)).astimezone(UTC).strftime("%H:%M:%S")


def span(summary: Summary, start_s: float, end_s: float) -> str:
    """'12:01:05–12:04:10' for a window."""
    return f"{clock(summary, start_s)}–{clock(summary, end_s)}"


def run_t(value: float) -> str:
    """Seconds from the run's start, as the scenario's phases and faults count them: '25', '27.1'."""
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def span_t(summary: Summary, start_s: float, end_s: float) -> str:
    """'12:01:05–12:04:10 UTC (t = 25–45 s)': wall clock and run-relative time side by side."""
    if anchor(summary) is None:
        return f"t = {run_t(start_s)}–{run_t(end_s)} s"
    return f"{span(summary, start_s, end_s)} UTC (t = {run_t(start_s)}–{run_t(end_s)} s)"


def clock_t(summary: Summary, t_s: float) -> str:
    """'12:01:05 (t = 25.3 s)': a moment as wall clock and run-relative time."""
    if anchor(summary) is None:
        return f"t = {run_t(t_s)} s"
    return f"{clock(summary, t_s)} (t = {run_t(t_s)} s)"


def check_value(check: str, value: float | None) -> str:
    """A verdict's threshold or observation in the unit its check name implies."""
    if value is None:
        return "–"
    name = check.lower()
    if "_ms" in name or name.startswith("ttft") or name.startswith("tpot") or name.startswith("e2e"):
        return ms(value)
    if name.endswith("_s") or "makespan" in name or "gap" in name or name == "early_abort":  # abort: at, of planned
        return secs(value)
    if any(word in name for word in ("rate", "share", "floor", "goodput", "ratio")):
        return pct(value, 1)
    return f"{value:g}"


def verdict_result(v: Verdict) -> str:
    """A check's result: PASS, FAIL, INCONCLUSIVE, VACUOUS (judged nothing) or NOT JUDGED (a tier's ``judged``)."""
    if v.check == JUDGED_CHECK:
        return "NOT JUDGED"
    if v.vacuous:
        return "VACUOUS"
    if v.inconclusive:
        return "INCONCLUSIVE"
    return "PASS" if v.passed else "FAIL"


def tier_label(state: TierState, unsure_word: str = "INCONCLUSIVE") -> str:
    """A tier's SLO cell: 'PASS', 'PASS (1 vacuous)', 'FAIL 1/2', 'INCONCLUSIVE 1/2', 'NOT JUDGED' or '–'.

    Vacuous checks are counted apart: they judged nothing, so they are neither among the passed nor the failed.
    """
    if state.state == "none":
        return "–"
    vacuous = f" ({state.vacuous} vacuous)" if state.vacuous else ""
    if state.state == "fail":
        return f"FAIL {state.failed}/{state.checks}{vacuous}"
    if state.state == "not_judged":
        return "NOT JUDGED (allowed)" if state.allowed else "NOT JUDGED"
    if state.state == "inconclusive":
        return f"{unsure_word} {state.unsure}/{state.checks}"
    return "PASS" + vacuous
