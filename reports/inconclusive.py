"""Why an SLO check is inconclusive, in words: "not enough samples for p99: 37 of 100 needed"."""

from __future__ import annotations

from audit.gates import min_samples
from audit.summary import Percentiles, Summary, Verdict
from reports import fmt

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
        return f"not enough samples for {key}: {pct.n} of {need} needed (a longer run or a lower percentile)"
    return verdict.message


def lines(summary: Summary) -> list[str]:
    """One line per inconclusive check: '<tier> <check> inconclusive: <reason>'."""
    return [f"{v.tier} {v.check} inconclusive: {reason(summary, v)}" for v in summary.verdicts if v.inconclusive]
