"""Find each tier's limit in one run: a pure controller fed by records and a clock (docs/find-limit.md).

The real runner (``loadgen/runner.py``, through ``RunOptions.limit``) and the simulator (``sim/run.py``) feed
it every request record their shard tail reads and ask ``look(now_s)`` every second; it answers with the load
scale to set (× the personas' rates, or one persona's) and says when it is ``done``. It ramps the load
(``start`` × ``factor``ᵏ), bisects between the last passing and the first failing step, then holds at the
highest passing level until the binding figure's 95 % interval is as narrow as asked, or the hold's cap.

Honest about lag: each step is a measurement window of its own. After a change of load, requests sent
during ``settle_s`` are not judged (the queue of the level before drains or builds); after the window the
load stays for ``lag_s`` while the window's requests finish, and requests sent then are judged in no step.
A step is judged only on requests *intended* (scheduled to be sent) inside its window, by the audit's own
classification (``classify_record``, per route's stack profile) and its interval functions (Wilson,
bootstrap quantile). Its requests still in flight when it is decided are counted when they end:
``result`` judges every step again on all its requests, and says when a live decision was not borne out.
A step with fewer than ``min_samples`` finished requests of a tier is extended; still thin, it is not a pass
(fail closed), and neither is a step where the generator could not send its arrivals (``not_sent``). A failing
step whose failing checks' 95 % intervals all reach under their limits is extended too (up to three times) before
its point verdict is taken: a short window's noise does not end the ramp.

Sooner, without crediting one level's queue to another (``_look_early``, ``_confirm``): a step that surely fails
(at 98 %) on its requests sent ``lag_s`` ago ends there; a step whose answered requests pass at its window's end
starts the next level at once and is confirmed on all its requests after its lag, those unanswered at the change
censored there (a failure the change could explain is ``unsure`` and its level measured again).

From a prior bracket (``prior``: ``--find-limit-from``, e.g. a simulated run's answer) the search starts at its low,
then tries its high, steps away from it in strides growing from its width until the limit is bracketed, and bisects
only to the width the plain ramp reaches: the prior moves where the steps are, never how one is judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from rushhour.audit import text
from rushhour.audit.classify import classify_record
from rushhour.audit.early import TierSoFar, latency_figures
from rushhour.audit.stats import wilson
from rushhour.scenarios.model import SLO, FindLimit, Scenario

NS = 1e9
MAX_EXTENSIONS = 3  # a thin step's window is extended this many times (by step_s) at most
NOT_SENT_SHARE = 0.01  # a step whose generator could not send more than this share of its arrivals is no pass
# A step is looked at every second before its window ends; deciding on the first confident look is a sequential
# test, so those looks use the early-abort watcher's stricter level (a one-sided 99 % bound each way)
EARLY_LEVEL = 0.98
MIN_SCALE = 1e-3  # a search started from a prior steps down no further than this (× the rates)
MIN_SHARE_N = 5  # a drop share surely under its limit still needs this many requests (the scenario's lowest min)
# unsure: failed on all its requests, but not on those the next level's load could not have touched (``_confirm``)
Outcome = Literal["pass", "fail", "thin", "limited", "unsure"]


@dataclass
class Check:
    """One SLO check of one tier on one step's requests: the point figure, its 95 % interval, the verdict."""

    tier: str
    check: str  # "ttft_ms.p99", "max_drop_rate"
    limit: float
    value: float
    low: float
    high: float
    n: int

    @property
    def passed(self) -> bool:
        return self.value <= self.limit

    @property
    def ratio(self) -> float:
        """How close to its limit (1 = at it): orders the checks, the binding one first."""
        return self.value / self.limit if self.limit > 0 else (math.inf if self.value > 0 else 0.0)

    def half_width(self) -> float:
        """The 95 % interval's half-width relative to the figure (to the limit for a share, which may be 0)."""
        base = self.limit if self.check == "max_drop_rate" else self.value
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or base <= 0:
            return math.inf
        return (self.high - self.low) / 2 / base

    def line(self) -> str:
        fmt = (lambda v: text.pct(v, 1)) if self.check == "max_drop_rate" else text.ms
        return (f"{self.tier} {self.check} {fmt(self.value)} [{fmt(self.low)}, {fmt(self.high)}] "
                f"{'≤' if self.passed else '>'} {fmt(self.limit)} (n={self.n})")


def tier_checks(tier: str, slo: SLO, so_far: TierSoFar, level: float = 0.95) -> list[Check]:
    """The checks the controller watches (drop rate, TTFT and end-to-end percentiles and max), point and interval
    (two-sided, at ``level``)."""
    out = []
    n = so_far.served + so_far.unserved + so_far.pending
    if slo.max_drop_rate is not None and n:
        rate = wilson(so_far.unserved, n, z=float(NormalDist().inv_cdf(0.5 + level / 2)))
        out.append(Check(tier, "max_drop_rate", slo.max_drop_rate, rate.value or 0.0,
                         rate.low if rate.low is not None else math.nan,
                         rate.high if rate.high is not None else math.nan, n))
    out += [Check(tier, f.check, f.limit, f.value, f.low, f.high, f.n) for f in latency_figures(slo, so_far, level)]
    return out


def watched(slo: SLO) -> bool:
    """Does the tier have a check the controller watches?"""
    return slo.max_drop_rate is not None or bool(slo.ttft_ms) or bool(slo.e2e_ms)


Seen = tuple[float, str, int, float | None, float | None, float, float | None, float]


@dataclass
class Step:
    """One level tried: when it was set, its measurement window, its requests per tier, its verdict."""

    index: int
    kind: Literal["ramp", "bisect", "hold"]
    scale: float
    set_s: float
    window: tuple[float, float]  # judged: requests intended in [start, end)
    judge_at_s: float
    extensions: int = 0
    # each finished request of a watched tier: (intended_s, tier, outcome, ttft_ms, e2e_ms, sent_s, first_s, end_s),
    # outcome 0 served, 1 not served but a retry may follow, 2 not served; tallied per judgement (``tally``)
    seen: list[Seen] = field(default_factory=list)
    # each served request's reported output tokens and time per output token: (tier, tokens, tpot_ms)
    tokens: list[tuple[str, int, float | None]] = field(default_factory=list)
    not_sent: int = 0
    sent: int = 0
    outcome: Outcome | None = None  # the live decision
    decided_s: float | None = None
    early: bool = False  # decided before its window's end, confidently, on its requests sent lag_s before
    provisional: bool = False  # passed at its window's end on the requests in by then; all of them not yet judged
    confirmed: bool | None = None  # that pass judged on all its window's requests: borne out or not
    abandoned: bool = False  # started on a pass that was not borne out: ended unjudged
    switched_s: float | None = None  # the load left this level before all its window's requests were in
    steady: bool = False  # a level measured again after an unsure step: the load stays until it is judged

    def holds(self, t_s: float) -> bool:
        return self.window[0] <= t_s < self.window[1]


@dataclass
class Verdict:
    """A step judged: its outcome, the binding check (the failing one nearest… or the one nearest its limit)."""

    outcome: Outcome
    checks: list[Check]
    binding: Check | None
    reason: str
    confident: bool = False  # the binding check's 95 % interval lies wholly on the verdict's side of its limit
    thin: bool = False  # a tier has fewer than min_samples finished requests


def tally(step: Step, sent_before_s: float = math.inf, best_after_s: float | None = None) -> dict[str, TierSoFar]:
    """The step's finished requests per tier, of those intended before ``sent_before_s``.

    With ``best_after_s`` (when the load changed), a request still unanswered then is censored there and counted
    at its best: served, its first token (if not in yet) and its end at that time. What the change could not
    have touched stays as it was."""
    out: dict[str, TierSoFar] = {}
    for t_s, tier, outcome, ttft, e2e, sent_s, first_s, end_s in step.seen:
        if t_s >= sent_before_s:
            continue
        if best_after_s is not None and end_s > best_after_s and sent_s < best_after_s:
            waited = (best_after_s - sent_s) * 1000.0
            ttft = ttft if outcome == 0 and first_s is not None and first_s <= best_after_s else waited
            outcome, e2e = 0, waited
        so_far = out.setdefault(tier, TierSoFar())
        if outcome == 0:
            so_far.served += 1
            if ttft is not None:
                so_far.ttft_ms.append(ttft)
            if e2e is not None:
                so_far.e2e_ms.append(e2e)
        elif outcome == 1:
            so_far.pending += 1
        else:
            so_far.unserved += 1
    return out


def judge(step: Step, slos: dict[str, SLO], min_samples: int, sent_before_s: float = math.inf,
          level: float = 0.95, best_after_s: float | None = None) -> Verdict:
    """A step's verdict on its requests (those intended before ``sent_before_s``): fail when a check's point figure
    is over its limit, else thin when a tier has too few requests, limited when the generator could not send,
    else pass; ``confident`` when the intervals (at ``level``) say so too."""
    checks: list[Check] = []
    thin = []
    tiers = tally(step, sent_before_s, best_after_s)
    for tier, slo in sorted(slos.items()):
        so_far = tiers.get(tier, TierSoFar())
        n = so_far.served + so_far.unserved + so_far.pending
        if n < min_samples and not share_known(slo, so_far):
            thin.append(f"{tier} {n}")
        checks += tier_checks(tier, slo, so_far, level)
    checks.sort(key=lambda c: -c.ratio)
    failing = [c for c in checks if not c.passed]
    binding = failing[0] if failing else (checks[0] if checks else None)
    if failing:
        sure = any(c.low > c.limit for c in failing)
        return Verdict("fail", checks, binding, f"{binding.line() if binding else ''}", sure, bool(thin))
    if thin:
        return Verdict("thin", checks, binding, f"too few finished requests (need {min_samples}): {', '.join(thin)}")
    arrivals = step.sent + step.not_sent
    if arrivals and step.not_sent / arrivals > NOT_SENT_SHARE:
        return Verdict("limited", checks, binding, f"the generator could not send {step.not_sent} of {arrivals} "
                                                   "arrivals (no free slot): the load was not offered")
    sure = all(c.high <= c.limit for c in checks)
    return Verdict("pass", checks, binding, binding.line() if binding else "no watched check", sure)


def share_known(slo: SLO, so_far: TierSoFar) -> bool:
    """A tier judged on its drop share alone, whose share is already surely under its limit (the Wilson bound at
    ``EARLY_LEVEL``, sound at small n, unlike a percentile's bootstrap): fewer than ``min_samples`` requests do."""
    n = so_far.served + so_far.unserved + so_far.pending
    if slo.max_drop_rate is None or slo.ttft_ms or slo.e2e_ms or n < MIN_SHARE_N:
        return False
    high = wilson(so_far.unserved, n, z=float(NormalDist().inv_cdf(0.5 + EARLY_LEVEL / 2))).high
    return high is not None and high <= slo.max_drop_rate


class LimitController:
    """Fed with a run's records while it goes; ``look`` says which load scale to set, ``done`` when it is over."""

    def __init__(self, scenario: Scenario, settings: FindLimit | None = None,
                 prior: Mapping[str, Any] | None = None) -> None:
        self.cfg = settings or scenario.find_limit or FindLimit()
        self.persona = self.cfg.persona
        self.slos = {t.name: t.slo for t in scenario.tiers if watched(t.slo)}
        self.unwatched = sorted({t.name for t in scenario.tiers} - set(self.slos))
        self.attempts = scenario.resilience.retries.max_attempts
        self.route_profiles = {"primary": scenario.target.profile}
        self.route_profiles.update({r.name: r.profile for r in scenario.resilience.fallback})
        self.base_rps = offered_rps(scenario, self.persona)
        self.cap_s = scenario.duration_s
        self.steps: list[Step] = []
        self.lo: float | None = None  # the highest passing level so far
        self.hi: float | None = None  # the lowest failing level so far
        self.bisections_left = self.cfg.bisect
        self.hold_from_s: float | None = None
        self.done = False
        self.status = "running"
        self.hold_end = ""
        # the bracket the bisection narrows to: what ``bisect`` halvings of the ramp's factor leave
        self.target_width = self.cfg.factor ** (0.5 ** self.cfg.bisect)
        self.prior = self._prior(prior) if prior is not None else None
        self.first = self.prior["low"] if self.prior is not None else self.cfg.start
        # with a prior: the ratio of the next step away from it (up past its high, down from a failing low),
        # squared after each step that still does not bracket the limit, never over the ramp's factor
        self.stride = self.cfg.factor
        if self.prior is not None:
            high = self.prior["high"]
            self.stride = min(self.cfg.factor, max(self.target_width, high / self.first if high else 0.0))
            if high:  # a wide prior bracket gets the halvings it needs to come down to the target width
                self.bisections_left = max(self.cfg.bisect, halvings(high / self.first, self.target_width))
        self.scale = self.first

    def _prior(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The prior bracket in this run's scales: a run folder's answer, measured against other rates, is
        converted by its arrivals per second; another persona's ramp means another load, refused."""
        if given.get("persona") is not None and given.get("persona") != self.persona:
            raise ValueError(f"--find-limit-from: the prior ramped persona {given.get('persona')!r}, this run "
                             f"{'the whole mix' if self.persona is None else repr(self.persona)}: not the same load")
        low, high = float(given["low"]), given.get("high")
        rps = given.get("base_rps")
        per = float(rps) / self.base_rps if isinstance(rps, int | float) and rps > 0 and self.base_rps > 0 else 1.0
        low, high = low * per, None if high is None else float(high) * per
        if not (0 < low <= self.cfg.max_scale) or (high is not None and not low < high):
            raise ValueError(f"--find-limit-from: the prior bracket [{text.scale(low)}, {text.scale(high)}] is not "
                             f"inside (0, max_scale {text.scale(self.cfg.max_scale)}] with its low under its high")
        return {"low": low, "high": None if high is None else min(high, self.cfg.max_scale),
                "source": str(given.get("source") or "")}

    # ---- the records ---------------------------------------------------------------------------
    def feed(self, record: dict[str, Any], shard: str = "") -> None:
        """Take one record line (the shard tail's): a request counts in the step whose window it was intended in."""
        if record.get("kind") != "request" or record.get("control") or record.get("twin_of"):
            return
        intended = record.get("intended_ns")
        if not isinstance(intended, int):
            return
        step = self._step_at(intended / NS)
        if step is None:
            return
        if record.get("not_sent"):
            step.not_sent += 1
            return
        step.sent += 1
        tier = str(record.get("tier", "?"))
        if tier not in self.slos:
            return
        profile = self.route_profiles.get(str(record.get("route") or "primary"), self.route_profiles["primary"])
        served = classify_record(profile, record) == "served"
        sent, first, done = record.get("sent_ns"), record.get("first_token_ns"), record.get("done_ns")
        ttft = e2e = None
        if served:
            outcome = 0
            if isinstance(sent, int) and isinstance(first, int):
                ttft = (first - sent) / 1e6
            if isinstance(sent, int) and isinstance(done, int):
                e2e = (done - sent) / 1e6
        elif int(record.get("attempt") or 1) < self.attempts:
            outcome = 1  # a retry may still follow: possibly served (as the early-abort watcher counts)
        else:
            outcome = 2
        sent_s = sent / NS if isinstance(sent, int) else intended / NS
        first_s = first / NS if isinstance(first, int) else None
        step.seen.append((intended / NS, tier, outcome, ttft, e2e, sent_s, first_s,
                          done / NS if isinstance(done, int) else sent_s))
        out = record.get("output_tokens")
        if served and isinstance(out, int) and not isinstance(out, bool) and out > 0:
            tpot = None
            if isinstance(first, int) and isinstance(done, int) and out > 1 and done > first:
                tpot = (done - first) / 1e6 / (out - 1)
            step.tokens.append((tier, out, tpot))

    def _step_at(self, t_s: float) -> Step | None:
        for step in reversed(self.steps):
            if step.holds(t_s):
                return step
            if step.window[1] <= t_s:
                return None
        return None

    # ---- the clock -----------------------------------------------------------------------------
    def start(self, now_s: float = 0.0) -> float:
        """The first step begins: the scale to set now."""
        self._begin("ramp", self.first, now_s)
        return self.scale

    def _begin(self, kind: Literal["ramp", "bisect", "hold"], scale: float, now_s: float) -> None:
        # a hold on the level already running (the last step passed) changes no load: nothing to settle
        same = kind == "hold" and bool(self.steps) and math.isclose(scale, self.scale)
        w0 = now_s + (0.0 if same else self.cfg.settle_s)
        w1 = math.inf if kind == "hold" else w0 + self.cfg.step_s
        self.steps.append(Step(len(self.steps), kind, scale, now_s, (w0, w1), w1 + self.cfg.lag_s))
        self.scale = scale
        if kind == "hold":
            self.hold_from_s = now_s

    def look(self, now_s: float) -> float | None:
        """The new scale when the load changes now, else None (``done`` turns True when the search is over)."""
        if self.done:
            return None
        if not self.steps:
            return self.start(now_s)
        changed = self._confirm(now_s)
        if changed is not None or self.done:
            return changed
        step = self.steps[-1]
        if step.kind == "hold":
            return self._look_hold(step, now_s)
        if now_s >= self.cap_s - self.cfg.lag_s and step.outcome is None:
            self._finish("cap", now_s)  # the run's own end comes before the step could be decided
            return None
        if now_s < step.judge_at_s:
            return self._look_early(step, now_s)
        verdict = judge(step, self.slos, self.cfg.min_samples)
        # too few requests, or a failure whose interval still reaches under its limit (a short window's noise):
        # the window grows. A pass is not extended so: the hold re-checks the level it settles on.
        unsure = verdict.outcome == "thin" or (verdict.outcome == "fail" and not verdict.confident)
        if unsure and step.extensions < MAX_EXTENSIONS:
            step.extensions += 1
            step.window = (step.window[0], step.window[1] + self.cfg.step_s)
            step.judge_at_s = step.window[1] + self.cfg.lag_s
            return None
        step.outcome, step.decided_s = verdict.outcome, now_s
        step.window = (step.window[0], min(step.window[1], now_s - self.cfg.lag_s))
        if verdict.outcome == "pass":
            self.lo = step.scale if self.lo is None else max(self.lo, step.scale)
        else:
            self.hi = step.scale if self.hi is None else min(self.hi, step.scale)
        return self._next(step, now_s)

    def _look_early(self, step: Step, now_s: float) -> float | None:
        """Decide a step before its ``lag_s`` is over.

        Before its window ends: when its requests sent ``lag_s`` ago or more already fail confidently (every tier
        with ``min_samples``, a failing check's interval wholly over its limit), the window closes there and the
        step is judged on those requests only. Never a pass so early: after a rise of load the queue is still
        building, and a window's first seconds look better than the level will (seen in virtual time: a level
        that passed on its first 5 s failed its hold). From its window's end:
        when those requests pass on their point figures, the next (higher) level starts at once, and the step is
        confirmed at ``judge_at_s`` on all the requests of its window (``_confirm``). Its last requests then
        finish under more load than their own, which can only make them slower or refused: a pass stays honest,
        and a failure then is taken as one (fail closed)."""
        cut = now_s - self.cfg.lag_s
        if cut <= step.window[0]:
            return None
        if now_s >= step.window[1] and not step.steady:
            ahead = judge(step, self.slos, self.cfg.min_samples, cut)
            if ahead.outcome == "pass":
                step.outcome, step.decided_s, step.provisional, step.switched_s = "pass", now_s, True, now_s
                self.lo = step.scale if self.lo is None else max(self.lo, step.scale)
                changed = self._next(step, now_s)
                if self.done or math.isclose(self.scale, step.scale):
                    step.switched_s = None  # the load stayed (a hold on this level, or the end): nothing to censor
                return changed
        verdict = judge(step, self.slos, self.cfg.min_samples, cut, EARLY_LEVEL)
        if not verdict.confident or verdict.thin or verdict.outcome != "fail":
            return None
        step.outcome, step.decided_s, step.early = "fail", now_s, True
        step.window = (step.window[0], cut)
        self.hi = step.scale if self.hi is None else min(self.hi, step.scale)
        return self._next(step, now_s)

    def _confirm(self, now_s: float, final: bool = False) -> float | None:
        """A step passed ahead of its late requests, judged on all of them once they are in (or at the end): when
        it fails after all, the level started on its pass is abandoned and the search goes on from the truth."""
        for step in self.steps:
            if not step.provisional or (now_s < step.judge_at_s and not final):
                continue
            step.provisional = False
            verdict = self._judged(step)
            step.confirmed = verdict.outcome == "pass"
            if step.confirmed:
                continue
            step.outcome, step.decided_s = verdict.outcome, now_s
            if verdict.outcome != "unsure":
                self.hi = step.scale if self.hi is None else min(self.hi, step.scale)
            below = [s.scale for s in self.steps if s.outcome == "pass" and (self.hi is None or s.scale < self.hi)]
            self.lo = max(below) if below else None
            current = self.steps[-1]
            if final or current is step:
                continue
            if current.outcome is None:  # started on the pass not borne out: it ends unjudged
                current.outcome, current.decided_s, current.abandoned = "thin", now_s, True
                current.window = (current.window[0], max(current.window[0], min(current.window[1], now_s)))
                if current.kind == "bisect":
                    self.bisections_left += 1
            self.status = "running"
            if verdict.outcome == "unsure":  # measured again, the load held until its requests are in
                self._begin("hold" if step.kind == "hold" else step.kind, step.scale, now_s)
                self.steps[-1].steady = True
                return self.scale
            return self._next(step, now_s)
        return None

    def _judged(self, step: Step) -> Verdict:
        """A step judged on all its requests; when the load changed before they were in, a failure the change could
        explain (its censored requests counted at their best, it passes) is ``unsure``, neither pass nor fail."""
        verdict = judge(step, self.slos, self.cfg.min_samples)
        if step.switched_s is None or verdict.outcome != "fail":
            return verdict
        best = judge(step, self.slos, self.cfg.min_samples, best_after_s=step.switched_s)
        if best.outcome == "fail":
            return verdict
        return Verdict("unsure", verdict.checks, verdict.binding, f"{verdict.reason}; but not once the requests the "
                       "next level's load could have touched are counted at their best: unsure", False)

    def _next(self, step: Step, now_s: float) -> float | None:
        cfg = self.cfg
        if self.hi is None:  # still ramping: every step so far passed
            if step.scale >= cfg.max_scale:
                self.status = "above_range"
                return self._hold_or_finish(now_s)
            self._begin("ramp", min(self._up(step.scale), cfg.max_scale), now_s)
            return self.scale
        if self.lo is None:
            down = self._down(step.scale)
            if down is not None:  # started from a prior: the limit is below it, step down towards it
                self._begin("ramp", down, now_s)
                return self.scale
            self.status = "below_range"  # the first level already failed: the limit is below ``start``
            self._finish("below_range", now_s)
            return None
        if self.bisections_left > 0 and self.hi / self.lo > self.target_width * (1.0 + 1e-9):
            self.bisections_left -= 1
            self._begin("bisect", math.sqrt(self.lo * self.hi), now_s)
            return self.scale
        self.status = "within"
        return self._hold_or_finish(now_s)

    def _up(self, scale: float) -> float:
        """The ramp's next level: × ``factor``; from a prior, its high first, then strides growing from it."""
        if self.prior is None:
            return scale * self.cfg.factor
        high = self.prior["high"]
        if high is not None and scale < high * (1.0 - 1e-9):
            return float(high)
        up, self.stride = scale * self.stride, min(self.cfg.factor, self.stride ** 2)
        return up

    def _down(self, scale: float) -> float | None:
        """Below a prior's failing low, the next level down (strides growing as going up); None without a prior
        (the first level failing is the answer: below the range) or at the floor ``MIN_SCALE``."""
        if self.prior is None:
            return None
        down, self.stride = scale / self.stride, min(self.cfg.factor, self.stride ** 2)
        return down if down >= MIN_SCALE else None

    def _hold_or_finish(self, now_s: float) -> float | None:
        if self.cfg.hold_s <= 0 or self.lo is None:
            self._finish(self.status, now_s)
            return None
        self._begin("hold", self.lo, now_s)
        return self.scale

    def _look_hold(self, step: Step, now_s: float) -> float | None:
        cfg = self.cfg
        capped = now_s - step.window[0] >= cfg.hold_s + step.extensions * cfg.step_s + cfg.lag_s
        ending = now_s >= self.cap_s - cfg.lag_s
        if capped and not ending:
            if math.isinf(step.window[1]):  # the window closes; its last requests finish while the load stays
                step.window = (step.window[0], now_s - cfg.lag_s)
                step.judge_at_s = now_s + cfg.lag_s
                return None
            if now_s < step.judge_at_s:
                return None
            # judged on all its window's requests: a refusal after a queue's timeout can come as late as lag_s
            verdict = judge(step, self.slos, cfg.min_samples)
            if verdict.outcome == "fail" and not verdict.confident and step.extensions < MAX_EXTENSIONS:
                step.extensions += 1  # a failure its interval does not bear out: more requests before the verdict
                step.window = (step.window[0], math.inf)
                return None
            lower = any(s.outcome == "pass" and s.scale < step.scale for s in self.steps)
            if verdict.outcome == "fail" and self.prior is not None and not lower:
                return self._hold_failed(step, now_s)  # nothing measured below it: step down from the prior
            self._finish(self.status, now_s, "the hold's time cap")
            return None
        if ending:
            step.window = (step.window[0], min(step.window[1], now_s - cfg.lag_s))
            self._finish(self.status, now_s, "the run's end")
            return None
        if now_s < step.window[0] + cfg.step_s + cfg.lag_s:
            return None
        # only requests sent lag_s ago or more: of the last ones, a fast refusal is in before a slow answer. The hold
        # looks every second, so a failure is taken at the early looks' stricter level (each look is a test)
        sure = judge(step, self.slos, cfg.min_samples, now_s - cfg.lag_s, EARLY_LEVEL)
        if sure.outcome == "fail" and sure.confident:  # it fails, surely: step back to the next passing level
            return self._hold_failed(step, now_s)
        verdict = judge(step, self.slos, cfg.min_samples, now_s - cfg.lag_s)
        binding = self.binding_check()
        if binding is None:
            return None
        found = next((c for c in verdict.checks if (c.tier, c.check) == binding), None)
        if found is not None and found.n >= self.cfg.min_samples and found.half_width() <= self.cfg.precision:
            step.window = (step.window[0], now_s)
            self._finish(self.status, now_s, "precision reached")
            return None
        return None

    def _hold_failed(self, step: Step, now_s: float) -> float | None:
        """The held level failed: hold the next lower passing level, or (from a prior, none measured) step down."""
        step.outcome, step.decided_s = "fail", now_s
        step.window = (step.window[0], min(step.window[1], now_s))
        self.hi = step.scale if self.hi is None else min(self.hi, step.scale)
        below = [s.scale for s in self.steps if s.outcome == "pass" and s.scale < self.hi]
        self.lo = max(below) if below else None
        if self.lo is None:
            down = self._down(step.scale)
            if down is not None:  # the prior's low held no longer: step down towards the limit
                self._begin("ramp", down, now_s)
                return self.scale
            self.status = "below_range"
            self._finish("below_range", now_s, "the hold failed and no lower level passed")
            return None
        self._begin("hold", self.lo, now_s)
        return self.scale

    def _finish(self, status: str, now_s: float, why: str = "") -> None:
        self.done = True
        if self.status == "running":
            self.status = status
        self.hold_end = why
        self._confirm(now_s, final=True)  # a pass still waiting for its late requests: judged on what is in
        if self.steps and self.steps[-1].outcome is None:
            last = self.steps[-1]
            last.decided_s = now_s
            last.outcome = judge(last, self.slos, self.cfg.min_samples).outcome
            if last.kind == "hold" and last.outcome == "fail":  # the held level failed after all: not the answer
                self.hi = last.scale if self.hi is None else min(self.hi, last.scale)
                below = [s.scale for s in self.steps if s.outcome == "pass" and s.scale < self.hi]
                self.lo = max(below) if below else None
                if self.lo is None and self.status == "within":  # nothing passed under it: not a bracket
                    self.status = "below_range"
        return None

    def binding_check(self) -> tuple[str, str] | None:
        """(tier, check) that failed at the lowest failing level: what binds first."""
        failing = [s for s in self.steps if s.outcome == "fail"]
        if not failing:
            return None
        low = min(failing, key=lambda s: s.scale)
        verdict = judge(low, self.slos, self.cfg.min_samples)
        return (verdict.binding.tier, verdict.binding.check) if verdict.binding else None

    def sentence(self) -> str:
        """The answer so far, in one line (the terminal's)."""
        return limit_sentence(self.result())

    # ---- the answer ----------------------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        """Every step judged again on all its requests (late ones included), the limit per tier and the binding
        check: run.json's ``find_limit``."""
        cfg = self.cfg
        steps: list[dict[str, Any]] = []
        per_tier_pass: dict[str, list[float]] = {t: [] for t in self.slos}
        per_tier_fail: dict[str, list[float]] = {t: [] for t in self.slos}
        for step in self.steps:
            verdict = self._judged(step)
            # a tier fails a step only on figures the next level's load could not have made worse
            best = (judge(step, self.slos, cfg.min_samples, best_after_s=step.switched_s).checks
                    if step.switched_s is not None else verdict.checks)
            tiers_out = {}
            for tier in self.slos:
                mine = [c for c in verdict.checks if c.tier == tier]
                so_far = tally(step).get(tier, TierSoFar())
                n = so_far.served + so_far.unserved + so_far.pending
                ok = bool(mine) and all(c.passed for c in mine) and n >= cfg.min_samples
                bad = any(not c.passed for c in best if c.tier == tier)
                tiers_out[tier] = {"outcome": "fail" if bad else "pass" if ok else "unsure" if mine and
                                   n >= cfg.min_samples else "thin", "n": n,
                                   "checks": [c.line() for c in mine], **step_tokens(step, tier)}
                if bad:
                    per_tier_fail[tier].append(step.scale)
                elif ok:
                    per_tier_pass[tier].append(step.scale)
            steps.append({
                "index": step.index, "kind": step.kind, "scale": round(step.scale, 6),
                "offered_rps": round(step.scale * self.base_rps, 4), "set_s": round(step.set_s, 3),
                "window_s": [round(step.window[0], 3), round(step.window[1], 3)],
                "live": step.outcome, "early": step.early, "ahead": step.confirmed, "abandoned": step.abandoned,
                "outcome": verdict.outcome, "reason": verdict.reason,
                "agrees": step.outcome in (None, verdict.outcome), "sent": step.sent, "not_sent": step.not_sent,
                "tiers": tiers_out})
        limits = {}
        for tier in self.slos:
            fails = per_tier_fail[tier]
            first_fail = min(fails) if fails else None
            passes = [s for s in per_tier_pass[tier] if first_fail is None or s < first_fail]
            low = max(passes) if passes else None
            limits[tier] = {"low_scale": low, "high_scale": first_fail,
                            "low_rps": None if low is None else round(low * self.base_rps, 4),
                            "high_rps": None if first_fail is None else round(first_fail * self.base_rps, 4),
                            "reached": first_fail is not None}
        binding = self.binding_check()
        hold = next((s for s in reversed(steps) if s["kind"] == "hold"), None)  # the last: where the search ended
        hold_check = None
        if hold is not None and binding is not None:
            held = self.steps[hold["index"]]
            hold_check = next((c for c in judge(held, self.slos, cfg.min_samples).checks
                               if (c.tier, c.check) == binding), None)
        # the answer from every step judged on all its requests (the live path chose the levels; the late requests
        # may turn a verdict): the lowest failing level, and the highest passing one below it
        fails = [s["scale"] for s in steps if s["outcome"] == "fail"]
        hi = min(fails) if fails else None
        passes = [s["scale"] for s in steps if s["outcome"] == "pass" and (hi is None or s["scale"] < hi)]
        lo = max(passes) if passes else None
        # a bracket the late requests undid (a hold started from a prior failing on them, nothing passed under it)
        status = "below_range" if self.status == "within" and lo is None and hi is not None else self.status
        return {
            "live_low_scale": self.lo, "live_high_scale": self.hi,
            "status": status, "persona": self.persona, "base_rps": round(self.base_rps, 4),
            "low_scale": lo, "high_scale": hi,
            "low_rps": None if lo is None else round(lo * self.base_rps, 4),
            "high_rps": None if hi is None else round(hi * self.base_rps, 4),
            "binding": None if binding is None else {"tier": binding[0], "check": binding[1]},
            "hold": None if hold is None else {
                "scale": hold["scale"], "window_s": hold["window_s"], "ended": self.hold_end,
                "precision": cfg.precision, "outcome": hold["outcome"],
                "check": None if hold_check is None else {
                    "line": hold_check.line(), "value": hold_check.value, "low": hold_check.low,
                    "high": hold_check.high, "n": hold_check.n,
                    "half_width": round(hold_check.half_width(), 4) if math.isfinite(hold_check.half_width())
                    else None}},
            "tiers": limits, "unwatched_tiers": self.unwatched, "steps": steps,
            "settings": cfg.model_dump(mode="json"), "prior": self.prior,
        }


def halvings(width: float, target: float) -> int:
    """Bisections that bring a bracket ``width`` wide (high / low) down to ``target`` or under."""
    if width <= target * (1.0 + 1e-9) or target <= 1.0:
        return 0
    return math.ceil(math.log2(math.log(width) / math.log(target)) - 1e-9)


def step_tokens(step: Step, tier: str) -> dict[str, float | None]:
    """A tier's output tokens/s over the step's window (its served requests' reported tokens) and the decode speed
    a served stream saw, 1000 / TPOT p50 (tokens/s per user): one point of the run's per-tier Pareto."""
    mine = [(n, tpot) for t, n, tpot in step.tokens if t == tier]
    span = step.window[1] - step.window[0]
    tpots = sorted(tp for _, tp in mine if tp is not None and tp > 0)
    per_user = 1000.0 / float(np.median(tpots)) if tpots else None
    return {"output_tokens_per_s": round(sum(n for n, _ in mine) / span, 3) if mine and 0 < span < math.inf else None,
            "tokens_per_s_per_user": None if per_user is None else round(per_user, 3)}


def offered_rps(scenario: Scenario, persona: str | None = None) -> float:
    """The open-loop arrival rate the scale multiplies (sessions or tasks per second, at scale 1)."""
    total = 0.0
    for p in scenario.personas:
        if persona is not None and p.name != persona:
            continue
        rate = getattr(getattr(p, "arrival", None), "rate", None) or getattr(p, "task_rate", None)
        if isinstance(rate, int | float):
            total += float(rate)
    return total


def limit_sentence(found: dict[str, Any]) -> str:
    """One line: the limit, the binding tier and check, the steps tried."""
    status, lo, hi = found.get("status"), found.get("low_scale"), found.get("high_scale")
    rps = found.get("base_rps") or 0.0
    tried = len(found.get("steps") or [])

    def at(scale: float | None) -> str:
        return "-" if scale is None else f"{text.plain(scale)}× ({text.plain(round(scale * rps, 3))}/s)"

    binding = found.get("binding") or {}
    who = f"; {binding.get('tier')} binds first on {binding.get('check')}" if binding else ""
    if status == "below_range":
        return f"limit below the first level {at(found.get('high_scale'))}: it already failed{who} ({tried} step(s))"
    if status == "above_range":
        return f"no tier failed up to {at(lo)}: the limit is above the range ({tried} step(s))"
    if lo is None or hi is None:
        return f"limit not found ({status}; {tried} step(s))"
    if status == "cap":  # a passing ramp or bisection level, never held: one real run's hold failed just there
        return (f"not confirmed: the run ended before the search did; {at(lo)} passed a step, {at(hi)} failed{who} "
                f"({tried} step(s))")
    return f"highest sustainable load {at(lo)}, first failing {at(hi)}{who} ({tried} step(s))"
