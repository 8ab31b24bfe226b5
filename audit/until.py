"""Precision-driven stop: end a run once a tier's figure is known well enough (``rushhour run --until``).

``--until "interactive ttft_ms.p99 ±5%"`` watches the tier's served, measured requests as the shard tail reads
them (the audit's classification, per route's stack profile) and asks, every couple of seconds, for the
figure's 95 % bootstrap interval (the audit's ``bootstrap_quantile_ci``); once its half-width is at most the
given share of the figure, with at least the samples the gate's bound needs for that percentile, the run is
stopped (``stop_reason`` ``precision_reached``, run.json's ``until``: the figure, its interval, n, when). Else
the run goes to its end: its duration is the cap. The figure the audit then reports is computed on every
request, as always; requests still in flight at the stop end unfinished, as at any stop.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rushhour.audit import text
from rushhour.audit.classify import classify_record
from rushhour.audit.gates import min_samples
from rushhour.audit.stats import QUANTILES, bootstrap_quantile_ci, sorted_quantiles
from rushhour.scenarios.model import Scenario

NS = 1e9
STOP_PRECISION = "precision_reached"
METRICS = ("ttft_ms", "e2e_ms")
_SPEC = re.compile(r"^\s*(?P<tier>[A-Za-z0-9_.\-]+)\s+(?P<metric>[a-z0-9_]+)\.(?P<key>p\d\d)\s*"
                   r"(?:±|\+-|\+/-)\s*(?P<pct>\d+(?:\.\d+)?)\s*%\s*$")


@dataclass(frozen=True)
class Until:
    """What to know and how well: a tier's latency percentile to within ± a share of it."""

    tier: str
    metric: str  # ttft_ms | e2e_ms
    key: str  # p50 | p90 | p95 | p99
    precision: float  # the 95 % half-width as a share of the figure

    @property
    def label(self) -> str:
        return f"{self.tier} {self.metric}.{self.key} ±{text.plain(self.precision * 100)}%"


def parse_until(spec: str, tiers: list[str] | None = None) -> Until:
    """``"interactive ttft_ms.p99 ±5%"`` → ``Until``; ValueError in one line naming what is wrong."""
    found = _SPEC.match(spec[:200])
    if found is None:
        raise ValueError(f"--until {spec[:80]!r}: use 'TIER METRIC.PXX ±N%', e.g. 'interactive ttft_ms.p99 ±5%' "
                         f"(metrics: {', '.join(METRICS)}; percentiles: {', '.join(QUANTILES)})")
    tier, metric, key, pct = found["tier"], found["metric"], found["key"], float(found["pct"])
    if metric not in METRICS or key not in QUANTILES:
        raise ValueError(f"--until: {metric}.{key} is not watched (metrics: {', '.join(METRICS)}; percentiles: "
                         f"{', '.join(QUANTILES)})")
    if not 0 < pct < 100:
        raise ValueError(f"--until: the margin must be between 0 and 100 %, got {text.plain(pct)} %")
    if tiers is not None and tier not in tiers:
        raise ValueError(f"--until: no tier {tier!r} in the scenario (its tiers: {', '.join(tiers)})")
    return Until(tier, metric, key, pct / 100)


def known_to(values: list[float], until: Until) -> dict[str, Any] | None:
    """The figure with its interval when its half-width is within the asked share (and n is enough), else None."""
    need = min_samples(until.key, "bound")
    if len(values) < need:
        return None
    arr = np.sort(np.asarray(values, dtype=np.float64))
    q = QUANTILES[until.key]
    value = float(sorted_quantiles(arr, [q])[0])
    low, high = bootstrap_quantile_ci(arr, q)
    if not (math.isfinite(low) and math.isfinite(high)) or value <= 0:
        return None
    half = (high - low) / 2 / value
    if half > until.precision:
        return None
    return {"stop_reason": STOP_PRECISION, "tier": until.tier, "check": f"{until.metric}.{until.key}",
            "value": round(value, 3), "low": round(float(low), 3), "high": round(float(high), 3), "n": len(arr),
            "half_width": round(half, 4), "precision": until.precision,
            "message": f"{until.tier} {until.metric}.{until.key} {text.ms(value)} [{text.ms(float(low))}, "
                       f"{text.ms(float(high))}] of {len(arr)} served requests: known to ±{text.pct(half, 1)}, "
                       f"within the ±{text.pct(until.precision, 1)} asked"}


@dataclass
class UntilWatcher:
    """Fed with a run's records; ``look`` says when the figure is known well enough (run.json's ``until``)."""

    scenario: Scenario
    until: Until
    values: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.route_profiles = {"primary": self.scenario.target.profile}
        self.route_profiles.update({r.name: r.profile for r in self.scenario.resilience.fallback})
        spans, at = [], 0.0
        for phase in self.scenario.phases:
            spans.append((at, at + phase.duration, phase.measured))
            at += phase.duration
        self.spans = spans

    def feed(self, record: dict[str, Any], shard: str = "") -> None:
        """Take one record line: a served, measured request of the tier adds its figure."""
        if (record.get("kind") != "request" or record.get("tier") != self.until.tier or record.get("not_sent")
                or record.get("control") or record.get("twin_of")):
            return
        intended = record.get("intended_ns")
        if not isinstance(intended, int) or not any(a <= intended / NS < b and m for a, b, m in self.spans):
            return
        profile = self.route_profiles.get(str(record.get("route") or "primary"), self.route_profiles["primary"])
        if classify_record(profile, record) != "served":
            return
        sent = record.get("sent_ns")
        end = record.get("first_token_ns" if self.until.metric == "ttft_ms" else "done_ns")
        if isinstance(sent, int) and isinstance(end, int) and end >= sent:
            self.values.append((end - sent) / 1e6)

    def look(self, elapsed_s: float) -> dict[str, Any] | None:
        """A decision to stop now (with ``at_s``), or None to go on."""
        decision = known_to(self.values, self.until)
        if decision is not None:
            decision["at_s"] = round(elapsed_s, 3)
        return decision
