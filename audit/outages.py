"""Scheduled outages: the scenario's faults that take a route's every replica down, kept apart from saturation.

A stack that answers nothing because it was switched off is not saturated: the audit names such
spans as outages (from the scenario, the testbed's fault schedule, which counts from the run's
t = 0) and leaves them out of the saturation windows. Pure functions; the scenario is the resolved
dict or model in ``run.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rushhour.audit.summary import Outage


def _outage(fault: Mapping[str, Any], replicas: int, route: str, end_s: float) -> Outage | None:
    """The outage one fault causes, or None (a fault that leaves a replica serving is not an outage)."""
    kind = str(fault.get("kind", ""))
    replica = fault.get("replica")
    everything = kind == "replica_down" and (replica is None or replicas <= 1)
    rate = fault.get("rate", 1.0)
    if kind == "error" and isinstance(rate, int | float) and rate >= 1.0:
        everything = True  # every arrival refused with the injected status
    if not everything:
        return None
    start = float(fault.get("at_s", 0.0) or 0.0)
    duration = fault.get("duration_s")
    stop = end_s if duration is None else min(end_s, start + float(duration))
    if stop <= start:
        return None
    name = str(fault.get("name") or kind)
    what = "every replica down" if kind == "replica_down" else f"every request answered {fault.get('status', 503)}"
    return Outage(start_s=start, end_s=stop, name=name, kind=kind, route=route,
                  detail=f"scheduled fault {name!r} ({kind}): {what}")


def scheduled_outages(scenario: Mapping[str, Any] | None, end_s: float) -> list[Outage]:
    """Every route's scheduled outages, by start (the primary's testbed and fallback routes' own testbeds)."""
    if not scenario:
        return []
    out: list[Outage] = []
    target = scenario.get("target") or {}
    if target.get("url") == "testbed":
        tb = target.get("testbed") or {}
        for fault in tb.get("faults") or []:
            if isinstance(fault, Mapping) and (o := _outage(fault, int(tb.get("replicas", 1) or 1), "primary", end_s)):
                out.append(o)
    for route in (scenario.get("resilience") or {}).get("fallback") or []:
        if not isinstance(route, Mapping) or route.get("url") != "testbed":
            continue
        tb = route.get("testbed") or {}
        for fault in tb.get("faults") or []:
            if isinstance(fault, Mapping):
                o = _outage(fault, int(tb.get("replicas", 1) or 1), str(route.get("name", "")), end_s)
                if o:
                    out.append(o)
    return sorted(out, key=lambda o: (o.start_s, o.route))


def outage_mask(outages: Sequence[Outage], bucket_s: float, buckets: int, route: str = "primary") -> np.ndarray:
    """Grid buckets that overlap an outage of ``route`` (True: the stack was down, not saturated)."""
    mask = np.zeros(buckets, dtype=bool)
    for o in outages:
        if o.route != route:
            continue
        a = max(0, int(np.floor(o.start_s / bucket_s)))
        b = min(buckets, int(np.ceil(o.end_s / bucket_s)))
        mask[a:b] = True
    return mask
