"""Why an SLO check is inconclusive, in words: "not enough samples for p99: 37 of 100 needed"."""

from __future__ import annotations

from rushhour.audit.gates import min_samples
from rushhour.audit.summary import Percentiles, Summary, Verdict
from rushhour.reports import fmt

CELL = "INCONCLUSIVE"  # a tier's SLO cell when a check could not be judged (the reason is a line below)


def reason(summary: Summary, verdict: Verdict) -> str:
    """What was missing to judge ``verdict`` (too few samples, or waits censored by the run's end)."""
    metric, _, key = verdict.check.partition(".")
    tier = next((t for t in summary.tiers if t.name == verdict.tier), None)
    pct = getattr(tier.latency, metric, None) if tier is not None and ":" not in metric else None
    if not isinstance(pct, Percentiles) or not key:
        return verdict.message  # a per-phase check or one of another kind: the gate's own words
    if key in pct.lower_bound:
        return (f"{pct.censored} of {pct.n} waits were cut off by the run's end, so {key} is only known to be "
                f"{fmt.pctl_text(pct, key)}")
    need = min_samples(key, verdict.judge)
    if pct.n < need:
        return f"not enough samples for {key}: {pct.n} of {need} needed ({_longer(summary, pct.n, need)})"
    return verdict.message


def _longer(summary: Summary, n: int, need: int) -> str:
    """What would give enough: that much more measured load at the same rate (the samples grow with it), or a
    lower percentile."""
    measured = _measured_s(summary)
    if n <= 0 or measured <= 0:
        return "a longer run or a lower percentile"
    return f"about {fmt.secs(measured * need / n)} of measured load at this rate, or a lower percentile"


def _measured_s(summary: Summary) -> float:
    """Seconds of the phases the figures come from (a warm-up left out of them is left out here too)."""
    left_out = set(summary.measurement.excluded_phases)
    kept = [float(p["end_s"]) - float(p["start_s"]) for p in summary.run.phases
            if p.get("measured", p.get("name") not in left_out) is not False
            and isinstance(p.get("start_s"), int | float) and isinstance(p.get("end_s"), int | float)]
    return sum(kept) if summary.run.phases else summary.run.duration_s


def lines(summary: Summary) -> list[str]:
    """One line per inconclusive check: '<tier> <check> inconclusive: <reason>'."""
    return [f"{v.tier} {v.check} inconclusive: {reason(summary, v)}" for v in summary.verdicts if v.inconclusive]
