"""Early abort: is a tier's SLO already hopeless, or is the stack over-saturated? (docs/scenarios.md#early-abort)

Two pure decisions and a watcher that feeds them while a run goes. The runner (``loadgen/runner.py``)
passes every request and health record its shard tail reads to ``Watcher.feed`` and asks
``Watcher.look`` every couple of seconds; a decision stops the load (SIGTERM, in-flight requests end
``unfinished``), is written to ``run.json`` (``stop_reason`` ``aborted_hopeless_slo`` or
``aborted_saturation``, ``abort``: what was decided) and fails the gate.

**Hopeless** — judged on the measured requests finished so far, with the audit's own interval
functions at a stricter level than the gate's (``LEVEL``: the looks repeat, so a one-sided 99 % bound
keeps a false abort rare): ``max_drop_rate`` when the Wilson lower bound of not served / finished
exceeds the limit (requests not served whose retry may still come count as possibly served);
``ttft_ms``/``e2e_ms`` percentiles when the bootstrap lower bound of the served requests' percentile
exceeds the limit, with at least as many samples as the gate's bound needs (``gates.min_samples``);
``max`` as soon as one served request is over it. A tier's per-phase SLOs (``slo.phases``) are
watched the same way on the requests whose first attempt was meant for that phase. This assumes the
rest of the run (or phase) looks like what was seen so far: a scenario whose later phases are much
lighter should not ask for it.

**Over-saturated** — over the last ``windows`` consecutive measured windows of ``window_s`` (the
run's first window, which starts from an empty stack, never counts): the backlog — requests in flight
plus arrivals the generator could not send because every slot was held (the generators' own counts) —
rose in every window and ended at least ``MIN_GROWTH`` and ``GROWTH_SHARE`` higher than it started,
while the attempts finished per window stayed flat (a stable load fills up at first too, but then its
throughput climbs to meet the arrivals: the queue only grows when the stack already finishes all it
can); or the share of finished attempts not served rose in every window (never fell), by at least
``MIN_CLIMB`` in all, to at least ``MIN_SHARE``, each window with ``MIN_FINISHED`` attempts or more
(refusals climb steadily).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from rushhour.audit import text
from rushhour.audit.classify import classify_record
from rushhour.audit.gates import min_samples
from rushhour.audit.stats import QUANTILES, bootstrap_quantile_ci, sorted_quantiles, wilson
from rushhour.scenarios.model import SLO, Abort, Scenario

LEVEL = 0.98  # two-sided: its lower end is a one-sided 99 % bound
Z_LEVEL = 2.3263478740408408  # the normal quantile of that two-sided 98 % (one-sided 99 %)
MIN_GROWTH = 10  # requests the backlog must have grown by, over the windows …
GROWTH_SHARE = 0.2  # … and at least this share of where it started
MIN_CLIMB = 0.2  # rise of the not-served share over the windows
MIN_SHARE = 0.5  # the not-served share the climb must reach
MIN_FINISHED = 10  # finished attempts a window needs for its share (or its throughput) to count
PLATEAU = 1.25  # the last window finishing at most this many times the first's: throughput is flat
NS = 1e9
STOP_HOPELESS, STOP_SATURATION = "aborted_hopeless_slo", "aborted_saturation"
STOP_REASONS = (STOP_HOPELESS, STOP_SATURATION)


@dataclass
class TierSoFar:
    """A tier's measured, finished requests so far (control twins left out)."""

    ttft_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    served: int = 0
    unserved: int = 0  # not served, and no retry can follow
    pending: int = 0  # not served, but a retry may still follow (counted as possibly served)


@dataclass(frozen=True)
class Figure:
    """One latency check of a tier on its served requests so far: the point figure and its interval."""

    check: str  # "ttft_ms.p99", "e2e_ms.max"
    limit: float
    value: float
    low: float
    high: float
    n: int


def latency_figures(slo: SLO, so_far: TierSoFar, level: float = 0.95,
                    need: Callable[[str], int] | None = None) -> list[Figure]:
    """Each ``ttft_ms``/``e2e_ms`` check of ``slo`` (percentiles with their bootstrap interval at ``level``, and
    ``max``) on ``so_far``'s served requests; a percentile with fewer than ``need(key)`` values is left out."""
    out = []
    for metric, values in (("ttft_ms", so_far.ttft_ms), ("e2e_ms", so_far.e2e_ms)):
        spec = getattr(slo, metric)
        if spec is None or not values:
            continue
        arr = np.sort(np.asarray(values, dtype=np.float64))
        top = float(arr[-1])
        for key, limit in spec.items():
            if key == "max":
                out.append(Figure(f"{metric}.max", limit, top, top, top, len(arr)))
            elif key in QUANTILES and (need is None or len(arr) >= need(key)):
                low, high = bootstrap_quantile_ci(arr, QUANTILES[key], level=level)
                value = float(sorted_quantiles(arr, [QUANTILES[key]])[0])
                out.append(Figure(f"{metric}.{key}", limit, value, float(low), float(high), len(arr)))
    return out


def hopeless(tier: str, slo: SLO, so_far: TierSoFar, min_n: int, phase: str | None = None) -> dict[str, Any] | None:
    """The first SLO check of ``tier`` that cannot pass any more, as run.json's ``abort``; None when none is.

    With ``phase``, ``slo`` is the tier's SLO for that phase and ``so_far`` that phase's requests: the
    check is named as the gate names it (``peak: ttft_ms.p99``).
    """
    n = so_far.served + so_far.unserved + so_far.pending
    pre = f"{phase}: " if phase else ""
    who = f"{tier} {phase}:" if phase else tier
    if slo.max_drop_rate is not None and n >= min_n:
        rate = wilson(so_far.unserved, n, z=Z_LEVEL)
        if rate.low is not None and rate.low > slo.max_drop_rate:
            return _decision(
                tier, pre + "max_drop_rate", slo.max_drop_rate, rate.low, n,
                f"{who} max_drop_rate: {so_far.unserved} of {n} not served so far; the 99 % lower bound "
                f"{text.pct(rate.low, 1)} is over the limit {text.pct(slo.max_drop_rate, 1)}", phase)
    for fig in latency_figures(slo, so_far, LEVEL, lambda key: max(min_n, min_samples(key, "bound"))):
        if fig.check.endswith(".max"):
            if fig.value > fig.limit:
                return _decision(tier, pre + fig.check, fig.limit, fig.value, fig.n,
                                 f"{who} {fig.check}: a served request took {text.ms(fig.value)}, over the "
                                 f"limit {text.ms(fig.limit)}", phase)
        elif math.isfinite(fig.low) and fig.low > fig.limit:
            return _decision(tier, pre + fig.check, fig.limit, fig.low, fig.n,
                             f"{who} {fig.check}: the 99 % lower bound {text.ms(fig.low)} of {fig.n} served "
                             f"requests so far is over the limit {text.ms(fig.limit)}", phase)
    return None


def _decision(tier: str, check: str, threshold: float, bound: float, n: int, message: str,
              phase: str | None = None) -> dict[str, Any]:
    out = {"stop_reason": STOP_HOPELESS, "kind": "hopeless_slo", "tier": tier, "check": check,
           "threshold": threshold, "bound": round(bound, 6), "n": n, "message": message}
    if phase:
        out["phase"] = phase
    return out


def saturated(in_flight: list[int], finished: list[int], unserved: list[int], window_s: float) -> dict[str, Any] | None:
    """Over-saturation over consecutive windows, as run.json's ``abort``; None when neither signal holds.

    ``in_flight`` has one value more than the windows (the count at each window's start, then at the
    last one's end); ``finished``/``unserved`` count the attempts that ended in each window. A stable
    load also fills up at first, for about one request's end-to-end time (Little's law), while the
    requests finishing per window climb to meet the arrivals; so growth counts only while that
    throughput is flat (``MIN_FINISHED`` or more in the first window, at most ``PLATEAU`` × as many in
    the last): the stack already finishes all it can, and the backlog still grows.
    """
    k = len(finished)
    span = f"the last {k} windows of {text.plain(window_s)} s"
    flat = k >= 2 and finished[0] >= MIN_FINISHED and finished[-1] <= PLATEAU * finished[0]
    if len(in_flight) == k + 1 and flat:
        rising = all(b > a for a, b in pairwise(in_flight))
        grown = in_flight[-1] - in_flight[0]
        if rising and grown >= MIN_GROWTH and grown >= GROWTH_SHARE * in_flight[0]:
            path = " → ".join(str(v) for v in in_flight)
            return {"stop_reason": STOP_SATURATION, "kind": "saturation", "signal": "queue_growth", "tier": None,
                    "series": in_flight,
                    "finished": finished,
                    "message": f"over-saturated: the backlog (requests in flight + not sent) grew in each "
                               f"of {span} ({path}) while the requests finished per window stayed flat "
                               f"({' → '.join(str(f) for f in finished)})"}
    if k >= 2 and all(f >= MIN_FINISHED for f in finished):
        shares = [u / f for u, f in zip(unserved, finished, strict=True)]
        climbing = all(b >= a for a, b in pairwise(shares))
        if climbing and shares[-1] - shares[0] >= MIN_CLIMB and shares[-1] >= MIN_SHARE:
            path = " → ".join(text.pct(s, 0) for s in shares)
            return {"stop_reason": STOP_SATURATION, "kind": "saturation", "signal": "not_served_climb", "tier": None,
                    "series": [round(s, 4) for s in shares],
                    "message": f"over-saturated: the share of attempts not served climbed through {span} ({path})"}
    return None


class Watcher:
    """Fed with a run's records while it goes; ``look`` says whether to stop now (and why)."""

    def __init__(self, scenario: Scenario) -> None:
        self.abort: Abort = scenario.abort or Abort()
        self.slos = {t.name: t.slo for t in scenario.tiers}
        self.attempts = scenario.resilience.retries.max_attempts
        # "served" is the classifier's answer, per route's stack profile, as the audit will decide it
        self.route_profiles = {"primary": scenario.target.profile}
        self.route_profiles.update({r.name: r.profile for r in scenario.resilience.fallback})
        spans, at = [], 0.0
        for phase in scenario.phases:
            spans.append((at, at + phase.duration, phase.measured))
            at += phase.duration
        self.spans = spans
        self.phase_names = [p.name for p in scenario.phases]
        self.tiers: dict[str, TierSoFar] = {}
        # per-phase SLOs (slo.phases): a tier's requests by the phase their first attempt was meant for
        self.phase_tiers: dict[tuple[str, str], TierSoFar] = {}
        self.first_phase: dict[str, str] = {}  # logical id -> its phase, while a retry may still follow
        self.flight: dict[str, list[tuple[int, int]]] = {}  # shard -> (ts_ns, in flight + not sent), in order
        self.ended: dict[int, list[int]] = {}  # window index -> [finished, not served]

    def _measured(self, t_s: float) -> bool:
        return any(a <= t_s < b and m for a, b, m in self.spans)

    def _phase(self, t_s: float) -> str:
        """The phase a time falls in, as the audit places it (after the last phase: the last)."""
        for (_, end, _), name in zip(self.spans, self.phase_names, strict=True):
            if t_s < end:
                return name
        return self.phase_names[-1] if self.phase_names else ""

    def _so_far(self, tier: str, record: dict[str, Any], intended_s: float, retry_follows: bool) -> list[TierSoFar]:
        """The tallies one finished attempt counts in: its tier's, and its phase's when that phase has an SLO."""
        out = [self.tiers.setdefault(tier, TierSoFar())]
        slo = self.slos.get(tier)
        if slo is None or not slo.phases:
            return out
        logical = str(record.get("logical_id") or record.get("request_id") or "")
        # the audit judges a retried request in the phase of its first intended send
        phase = self.first_phase.pop(logical, None) or self._phase(intended_s)
        if retry_follows and logical:
            self.first_phase[logical] = phase
        if phase in slo.phases:
            out.append(self.phase_tiers.setdefault((tier, phase), TierSoFar()))
        return out

    def feed(self, record: dict[str, Any], shard: str = "") -> None:
        """Take one record line (a request or a health sample) as the shard tail read it."""
        kind = record.get("kind")
        if kind == "health":
            ts, flight, unsent = record.get("ts_ns"), record.get("in_flight"), record.get("not_sent_total") or 0
            if isinstance(ts, int) and isinstance(flight, int) and isinstance(unsent, int):
                # arrivals the generator could not even send (every slot held) are demand the stack did not
                # take either: the backlog is what is in flight plus what was turned away at the door
                self.flight.setdefault(shard, []).append((ts, flight + unsent))
            return
        if kind != "request" or record.get("not_sent") or record.get("control") or record.get("twin_of"):
            return
        intended = record.get("intended_ns")
        if not isinstance(intended, int) or not self._measured(intended / NS):
            return
        route = str(record.get("route") or "primary")
        profile = self.route_profiles.get(route, self.route_profiles["primary"])
        served = classify_record(profile, record) == "served"
        done = record.get("done_ns")
        if isinstance(done, int):
            window = self.ended.setdefault(int(done / NS // self.abort.window_s), [0, 0])
            window[0] += 1
            window[1] += 0 if served else 1
        retry_follows = not served and int(record.get("attempt") or 1) < self.attempts
        sent, first = record.get("sent_ns"), record.get("first_token_ns")
        for tier in self._so_far(str(record.get("tier", "?")), record, intended / NS, retry_follows):
            if served:
                tier.served += 1
                if isinstance(sent, int) and isinstance(first, int):
                    tier.ttft_ms.append((first - sent) / 1e6)
                if isinstance(sent, int) and isinstance(done, int):
                    tier.e2e_ms.append((done - sent) / 1e6)
            elif retry_follows:
                tier.pending += 1
            else:
                tier.unserved += 1

    def look(self, elapsed_s: float) -> dict[str, Any] | None:
        """A decision to stop now (run.json's ``abort``, with ``at_s``), or None to go on."""
        if elapsed_s < self.abort.after_s:
            return None
        decision = None
        if self.abort.hopeless_slo:
            for name, so_far in sorted(self.tiers.items()):
                slo = self.slos.get(name)
                if slo is not None and (decision := hopeless(name, slo, so_far, self.abort.min_samples)):
                    break
            for (name, phase), so_far in sorted(self.phase_tiers.items()):
                if decision is not None:
                    break
                decision = hopeless(name, self.slos[name].phases[phase], so_far, self.abort.min_samples, phase)
        if decision is None and self.abort.saturation:
            decision = self._saturation(elapsed_s)
        if decision is not None:
            decision["at_s"] = round(elapsed_s, 3)
        return decision

    def _saturation(self, elapsed_s: float) -> dict[str, Any] | None:
        width, k = self.abort.window_s, self.abort.windows
        last = int(elapsed_s // width) - 1  # the last window that has ended (window 0 never counts)
        first = last - k + 1
        if first < 1 or not all(self._measured_window(w) for w in range(first, last + 1)):
            return None
        in_flight = [self._in_flight_at((first + i) * width) for i in range(k + 1)]
        if any(v is None for v in in_flight):
            return None
        counts = [self.ended.get(w, [0, 0]) for w in range(first, last + 1)]
        return saturated([int(v) for v in in_flight if v is not None], [c[0] for c in counts],
                         [c[1] for c in counts], width)

    def _measured_window(self, w: int) -> bool:
        a, b = w * self.abort.window_s, (w + 1) * self.abort.window_s
        return all(m for start, end, m in self.spans if start < b and end > a) and b <= self.spans[-1][1]

    def _in_flight_at(self, t_s: float) -> int | None:
        """The backlog at ``t_s``: each process's last sample at or before it, summed (None: no sample)."""
        total, seen = 0, False
        for samples in self.flight.values():
            i = bisect_right(samples, (int(t_s * NS), 1 << 62)) - 1
            if i >= 0:
                total += samples[i][1]
                seen = True
        return total if seen else None
