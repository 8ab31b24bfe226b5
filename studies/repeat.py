"""Repeated trials (``rushhour run --repeat N``): seeds, and per-tier figures aggregated across runs (pure).

Each run is audited on its own; this module folds their summaries into ``repeat.json``. Between-run
intervals are **Student t-intervals over the runs' own figures** (one value per run: its drop rate,
its TTFT p50, its TTFT p99): mean ± t(0.975, n − 1) · sd / √n. A t-interval, not a bootstrap: with the
handful of runs a repeat has (3–10), a bootstrap over run means is too narrow (it cannot see beyond
the values drawn), while the t-interval widens honestly for small n. It treats runs as independent
draws of the same stack, which different seeds on the same scenario are meant to be.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rushhour.audit import text
from rushhour.audit.summary import Summary

REPEAT_SCHEMA = "rushhour.repeat/1"
GateOn = Literal["any", "aggregate", "both"]


def derive_seed(seed: int, index: int) -> int:
    """Run ``index``'s seed (1-based): the scenario's own for the first, then a hash of (seed, index)."""
    if index <= 1:
        return seed
    digest = hashlib.sha256(f"rushhour-repeat:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2**31 - 1)


def _t_density(x: float, df: int) -> float:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf_upper_half(x: float, df: int, steps: int = 2000) -> float:
    """P(0 ≤ T ≤ x) by Simpson's rule (the density is smooth and bounded)."""
    h = x / steps
    total = _t_density(0.0, df) + _t_density(x, df)
    for i in range(1, steps):
        total += (4 if i % 2 else 2) * _t_density(i * h, df)
    return total * h / 3


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 0.5) of Student's t with ``df`` degrees of freedom, by bisection."""
    target = p - 0.5
    low, high = 0.0, 1.0
    while _t_cdf_upper_half(high, df) < target:
        high *= 2
        if high > 1e6:
            return math.inf
    for _ in range(60):
        mid = (low + high) / 2
        if _t_cdf_upper_half(mid, df) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


class Spread(BaseModel):
    """One figure across runs: each run's value, their mean and a 95 % t-interval of that mean."""

    model_config = ConfigDict(extra="forbid")
    values: list[float | None]
    n: int = Field(description="runs with a value")
    mean: float | None
    sd: float | None
    low: float | None
    high: float | None


def spread(values: list[float | None], lower: float | None = None, upper: float | None = None) -> Spread:
    """The mean of the runs' values with its 95 % t-interval (clipped to [lower, upper]); n < 2: no interval."""
    have = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(have)
    if not n:
        return Spread(values=values, n=0, mean=None, sd=None, low=None, high=None)
    mean = sum(have) / n
    if n < 2:
        return Spread(values=values, n=n, mean=mean, sd=None, low=None, high=None)
    sd = math.sqrt(sum((v - mean) ** 2 for v in have) / (n - 1))
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if lower is not None:
        low = max(lower, low)
    if upper is not None:
        high = min(upper, high)
    return Spread(values=values, n=n, mean=mean, sd=sd, low=low, high=high)


class AggregateCheck(BaseModel):
    """An SLO judged on the runs' mean (point) or on the t-interval's pessimistic end (bound)."""

    model_config = ConfigDict(extra="forbid")
    check: str
    threshold: float
    judge: Literal["point", "bound"]
    value: float | None
    passed: bool
    message: str


class RepeatTier(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    drop_rate: Spread
    ttft_p50_ms: Spread
    ttft_p99_ms: Spread
    runs_passed: int = Field(description="runs in which every check of this tier passed")
    runs: int
    passed: list[bool] = Field(default_factory=list, description="per run (in `runs` order): every check of this "
                               "tier passed in a valid run")
    checks: list[AggregateCheck] = Field(default_factory=list)


class RepeatRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    seed: int
    run_id: str
    folder: str
    exit_code: int
    passed: bool
    valid: bool
    stop_reason: str


class RepeatSummary(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_: str = Field(default=REPEAT_SCHEMA, alias="schema")
    scenario: str
    seed: int
    interval: str = "95 % Student t-interval over the runs' values (mean ± t(0.975, n-1)·sd/√n)"
    gate_on: GateOn
    runs: list[RepeatRun]
    tiers: list[RepeatTier]
    runs_exit_code: int = Field(description="0 when every run passed; else 1 if any failed, else 2")
    aggregate_passed: bool
    exit_code: int = Field(description="what `rushhour gate` and `run --repeat` return under gate_on")


def _tier_passed(summary: Summary, tier: str) -> bool:
    mine = [v for v in summary.verdicts if v.tier == tier]
    return summary.validity.valid and all(v.passed for v in mine if not v.vacuous)  # a NOT JUDGED tier's `judged` fails


def _aggregate_checks(tier: RepeatTier, judge: Literal["point", "bound"],
                      max_drop_rate: float | None, ttft: dict[str, float]) -> list[AggregateCheck]:
    out = []
    figures = [("max_drop_rate", max_drop_rate, tier.drop_rate)]
    figures += [(f"ttft_ms.{key}", ttft.get(key), getattr(tier, f"ttft_{key}_ms")) for key in ("p50", "p99")]
    for check, limit, figure in figures:
        if limit is None:
            continue
        # one run has no between-run interval: its bound is None and the check fails (fail closed)
        value = figure.high if judge == "bound" else figure.mean
        passed = value is not None and value <= limit
        show = (lambda v: text.pct(v, 2)) if check == "max_drop_rate" else text.ms
        shown = text.DASH if value is None else show(value)
        limit_shown = show(limit)
        used = "upper 95 % bound of the runs' mean" if judge == "bound" else "mean over runs"
        message = (f"{tier.name} {check}: {used} {shown} " + ("≤" if passed else "not ≤") + f" {limit_shown}"
                   + ("" if value is not None else " (no value to judge)"))
        out.append(AggregateCheck(check=check, threshold=limit, judge=judge, value=value, passed=passed,
                                  message=message))
    return out


def _runs_exit(codes: list[int]) -> int:
    if all(c == 0 for c in codes):
        return 0
    return 1 if any(c == 1 for c in codes) else 2


def aggregate(summaries: list[Summary], runs: list[RepeatRun], scenario: str, seed: int,
              slos: dict[str, tuple[Literal["point", "bound"], float | None, dict[str, float]]],
              gate_on: GateOn = "any") -> RepeatSummary:
    """Fold the runs' summaries; ``slos``: tier -> (judge, max_drop_rate, ttft_ms limits) from the scenario."""
    names: list[str] = []
    for s in summaries:
        names += [t.name for t in s.tiers if t.name not in names]
    tiers = []
    for name in names:
        own = [next((t for t in s.tiers if t.name == name), None) for s in summaries]
        tier = RepeatTier(
            name=name,
            drop_rate=spread([t.drop_rate.value if t else None for t in own], 0.0, 1.0),
            ttft_p50_ms=spread([t.latency.ttft_ms.p50 if t else None for t in own], 0.0),
            ttft_p99_ms=spread([t.latency.ttft_ms.p99 if t else None for t in own], 0.0),
            runs_passed=sum(1 for s in summaries if _tier_passed(s, name)),
            passed=[_tier_passed(s, name) for s in summaries],
            runs=len(summaries),
        )
        judge, drop, ttft = slos.get(name, ("point", None, {}))
        tier.checks = _aggregate_checks(tier, judge, drop, ttft)
        tiers.append(tier)
    runs_code = _runs_exit([r.exit_code for r in runs])
    aggregate_passed = all(c.passed for t in tiers for c in t.checks) and any(t.checks for t in tiers)
    aggregate_code = 0 if aggregate_passed else (1 if any(t.checks for t in tiers) else 2)
    # a mean over a run that could not measure (invalid, or stopped before its end) is no pass either
    if aggregate_code == 0 and not all(r.valid and r.stop_reason == "completed" for r in runs):
        aggregate_code = 2
    if gate_on == "any":
        code = runs_code
    elif gate_on == "aggregate":
        code = aggregate_code
    else:
        code = max(runs_code, aggregate_code) if 1 not in (runs_code, aggregate_code) else 1
    return RepeatSummary(scenario=scenario, seed=seed, gate_on=gate_on, runs=runs, tiers=tiers,
                         runs_exit_code=runs_code, aggregate_passed=aggregate_passed, exit_code=code)
