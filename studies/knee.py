"""Capacity analysis: per-tier SLO knees of a load sweep, and the multi-tier study's figures.

Pure functions over ``Summary`` objects (one per sweep step or study cell); nothing here runs load.
A tier's knee is the highest offered load that still meets its SLO: the last passing step before the
first failing one, reported as an interval [last pass, first fail] with whether the pass at the knee
is confident (every check's 95 % interval on the passing side of its threshold).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rushhour.audit import text
from rushhour.audit.gates import cut_streams
from rushhour.audit.judged import JUDGED_CHECK
from rushhour.audit.summary import UNSERVED_CLASSES, Percentiles, Rate, Summary, TierSummary, Verdict

SWEEP_SCHEMA = "rushhour.sweep/1"
STUDY_SCHEMA = "rushhour.study/1"
Status = Literal["pass", "fail", "no_slo", "no_data"]
KneeStatus = Literal["within", "always_passes", "never_passes", "no_slo", "no_data"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- checks with confidence


class Check(_Model):
    """One SLO check of one tier at one step, with the interval it was judged against."""

    check: str
    threshold: float
    observed: float | None
    low: float | None
    high: float | None
    passed: bool
    confident: bool  # the whole 95 % interval lies on the verdict's side of the threshold
    inconclusive: bool = False  # too few samples (or censored): not a pass, and never a confident fail
    judge: Literal["point", "bound"] = "point"
    bound: float | None = None  # the confidence bound the verdict used when judge = bound


def _interval(tier: TierSummary, check: str) -> tuple[float | None, float | None, bool]:
    """(low, high, higher_is_worse) of the statistic behind a check, when the summary has one."""
    head, _, tail = check.partition(".")
    rate: Rate | None = None
    if head == "max_drop_rate":
        rate = tier.drop_rate
    elif head == "max_drop_rate_by_class":
        rate = tier.drop_rate_by_class.get(tail)
    elif head == "max_429_share":
        rate = tier.share_429
    elif head == "max_503_share":
        rate = tier.share_503
    elif head == "min_goodput":
        return tier.goodput.low, tier.goodput.high, False
    elif head == "floor_share" and tier.floor.rate is not None:
        return tier.floor.rate.low, tier.floor.rate.high, False
    elif head in ("tasks", "sessions") and tail == "max_deadline_miss_rate":
        stats = tier.tasks if head == "tasks" else tier.sessions
        rate = stats.deadline_miss_rate if stats is not None else None
    elif head == "max_preempted_in_progress":  # a count: from those named preempted to those plus cut streams
        return float(tier.preempted_in_progress), float(tier.preempted_in_progress + cut_streams(tier)), True
    elif tail and hasattr(tier.latency, head):
        pct: Percentiles = getattr(tier.latency, head)
        ci = pct.ci.get(tail)
        return (ci[0], ci[1], True) if ci else (None, None, True)
    if rate is not None:
        return rate.low, rate.high, True
    return None, None, True


def judge_check(tier: TierSummary, verdict: Verdict) -> Check:
    """A verdict plus whether its interval makes it confident."""
    low, high, higher_worse = _interval(tier, verdict.check)
    thr = verdict.threshold
    if verdict.inconclusive:
        confident = False
    elif low is None or high is None:
        confident = verdict.judge == "bound"
    elif verdict.passed:
        confident = high <= thr if higher_worse else low >= thr
    else:
        confident = low > thr if higher_worse else high < thr
    return Check(check=verdict.check, threshold=thr, observed=verdict.observed, low=low, high=high,
                 passed=verdict.passed, confident=bool(confident), inconclusive=verdict.inconclusive,
                 judge=verdict.judge, bound=verdict.bound)


# --------------------------------------------------------------------------- steps


class TierStep(_Model):
    """One tier at one load step."""

    tier: str
    priority: int
    requests: int
    served: int
    offered_rps: float
    goodput_per_s: float
    goodput: float | None  # share served within the latency SLO
    drop_rate: float | None
    drop_low: float | None
    drop_high: float | None
    drop_by_class: dict[str, float] = Field(default_factory=dict)
    unfinished: int = Field(default=0, description="requests the step's run ended while they were in flight")
    ttft_p99_ms: float | None
    ttft_p99_ci: tuple[float, float] | None
    e2e_p99_ms: float | None
    tpot_p50_ms: float | None = Field(default=None, description="served requests' time per output token, p50")
    output_tokens_per_s: float | None = Field(default=None, description="served attempts' reported output tokens "
                                              "per second of the measured window")
    status: Status
    confident: bool
    checks: list[Check] = Field(default_factory=list)


class Step(_Model):
    """One audited run of a sweep."""

    index: int
    scale: float
    replicas: int | None
    run_dir: str
    run_id: str
    seed: int
    duration_s: float
    offered_rps: float
    valid: bool
    reasons: list[str] = Field(default_factory=list)
    tiers: list[TierStep]

    def tier(self, name: str) -> TierStep | None:
        """The row of one tier, if present."""
        return next((t for t in self.tiers if t.tier == name), None)


def _tier_status(tier: TierSummary, checks: list[Check]) -> tuple[Status, bool]:
    if tier.requests == 0:
        return "no_data", False
    if not checks:
        return "no_slo", False
    if all(c.passed for c in checks):
        return "pass", all(c.confident for c in checks)
    return "fail", any(c.confident for c in checks if not c.passed)


def step_from_summary(summary: Summary, index: int, scale: float, replicas: int | None = None,
                      run_dir: str = "", duration_s: float | None = None) -> Step:
    """Reduce an audited run to the per-tier figures a sweep plots and judges."""
    duration = duration_s or summary.run.duration_s or 1.0
    if summary.measurement.measured_s:  # the tiers' counts cover the measured phases only (warm-up left out)
        duration = summary.measurement.measured_s
    rows: list[TierStep] = []
    for tier in summary.tiers:
        # a check that judged nothing at this level (no saturation yet) says nothing about the knee either
        checks = [judge_check(tier, v) for v in summary.verdicts
                  if v.tier == tier.name and not v.vacuous and v.check != JUDGED_CHECK]
        status, confident = _tier_status(tier, checks)
        ttft = tier.latency.ttft_ms
        ci = ttft.ci.get("p99")
        rows.append(TierStep(
            tier=tier.name, priority=tier.priority, requests=tier.requests, served=tier.by_class.get("served", 0),
            offered_rps=tier.requests / duration, goodput_per_s=tier.goodput_per_s, goodput=tier.goodput.value,
            drop_rate=tier.drop_rate.value, drop_low=tier.drop_rate.low, drop_high=tier.drop_rate.high,
            drop_by_class={k: r.value for k, r in tier.drop_rate_by_class.items()
                           if k in UNSERVED_CLASSES and r.value},
            unfinished=tier.by_class.get("unfinished", 0),
            ttft_p99_ms=ttft.p99, ttft_p99_ci=(ci[0], ci[1]) if ci else None, e2e_p99_ms=tier.latency.e2e_ms.p99,
            tpot_p50_ms=tier.latency.tpot_ms.p50, output_tokens_per_s=tier.output_tokens_per_s,
            status=status, confident=confident, checks=checks,
        ))
    return Step(
        index=index, scale=scale, replicas=replicas, run_dir=run_dir, run_id=summary.run.run_id,
        seed=summary.run.seed, duration_s=duration, offered_rps=sum(t.requests for t in summary.tiers) / duration,
        valid=summary.validity.valid, reasons=list(summary.validity.reasons), tiers=rows,
    )


# --------------------------------------------------------------------------- knees


@dataclass(frozen=True)
class KneePoint:
    """What knee detection needs from one step."""

    scale: float
    load: float  # offered req/s (all tiers)
    status: Status
    confident: bool


@dataclass(frozen=True)
class KneeCore:
    """Knee detection result: indices into the points sorted by scale."""

    status: KneeStatus
    knee: int | None  # last pass before the first fail
    fail: int | None  # first fail
    noisy: bool  # a pass after the first fail
    passes_again: int | None = None


def find_knee(points: Sequence[KneePoint]) -> KneeCore:
    """The last passing point before the first failing one, on points sorted by scale."""
    judged = [i for i, p in enumerate(points) if p.status in ("pass", "fail")]
    if not points:
        return KneeCore("no_data", None, None, False)
    if not judged:
        kinds = {p.status for p in points}
        return KneeCore("no_slo" if "no_slo" in kinds else "no_data", None, None, False)
    first_fail = next((i for i in judged if points[i].status == "fail"), None)
    if first_fail is None:
        return KneeCore("always_passes", judged[-1], None, False)
    before = [i for i in judged if i < first_fail and points[i].status == "pass"]
    again = next((i for i in judged if i > first_fail and points[i].status == "pass"), None)
    if not before:
        return KneeCore("never_passes", None, first_fail, again is not None, again)
    return KneeCore("within", before[-1], first_fail, again is not None, again)


class Knee(_Model):
    """One tier's knee at one replica count."""

    tier: str
    replicas: int | None
    status: KneeStatus
    knee_scale: float | None = None
    knee_rps: float | None = None  # total offered load at the knee
    knee_tier_rps: float | None = None  # the tier's own offered load at the knee
    fail_scale: float | None = None
    fail_rps: float | None = None
    fail_checks: list[str] = Field(default_factory=list)
    fail_unjudged: bool = Field(default=False, description="every check failing at fail_scale was inconclusive "
                                "(too few samples): not judged there, which fails closed")
    confident_pass: bool = False
    confident_fail: bool = False
    noisy: bool = False
    passes_again_scale: float | None = None
    drop_onset_scale: float | None = None
    drop_onset_rps: float | None = None
    drop_onset_rate: float | None = None
    drop_onset_class: str | None = None
    sentence: str = ""


def check_text(c: Check) -> str:
    """A check in words: its figure against its threshold (or why it could not be judged)."""
    if c.inconclusive:
        return f"{c.check} inconclusive (too few samples to judge)"
    def num(v: float | None) -> str:
        if v is None or "_ms" in c.check:
            return text.ms(v)
        return text.pct(v, 1) if v <= 1 else text.plain(v)

    floor = c.check.startswith("min_") or c.check == "floor_share"
    op = "<" if floor else ">"
    if c.judge == "bound" and c.bound is not None:
        # judged on its confidence bound: the observed figure alone may lie on the passing side
        if (c.bound < c.threshold) if floor else (c.bound > c.threshold):
            return f"{c.check} bound {num(c.bound)} {op} {num(c.threshold)} (observed {num(c.observed)})"
        return f"{c.check} {num(c.observed)}: too few samples to bound it within {num(c.threshold)}"
    return f"{c.check} {num(c.observed)} {op} {num(c.threshold)}"


_CLASS_WORDS = {"queue_full": "rejected (queue full)", "queue_timeout": "timed out in queue", "shed": "shed",
                "preempted": "preempted", "overloaded": "refused (overloaded)", "rate_limited": "rate limited",
                "failed": "failed", "timeout": "timed out at the client", "transport": "unanswered (transport)",
                "cancelled": "cancelled by the server", "unfinished": "cut unfinished by the run's end",
                "abandoned": "abandoned by users out of patience",
                "unclassified": "answered with errors no rule knows (unclassified)"}


def tier_knee(steps: Sequence[Step], tier: str, replicas: int | None = None, onset: float = 0.01) -> Knee:
    """Knee, failure point and drop onset of one tier over steps of one replica count."""
    rows = sorted(((s, s.tier(tier)) for s in steps), key=lambda p: p[0].scale)
    pairs = [(s, t) for s, t in rows if t is not None]
    points = [KneePoint(s.scale, s.offered_rps, t.status, t.confident) for s, t in pairs]
    core = find_knee(points)
    knee = Knee(tier=tier, replicas=replicas, status=core.status, noisy=core.noisy)
    if core.knee is not None:
        s, t = pairs[core.knee]
        knee.knee_scale, knee.knee_rps, knee.knee_tier_rps = s.scale, s.offered_rps, t.offered_rps
        knee.confident_pass = t.confident
    if core.fail is not None:
        s, t = pairs[core.fail]
        knee.fail_scale, knee.fail_rps, knee.confident_fail = s.scale, s.offered_rps, t.confident
        failed = [c for c in t.checks if not c.passed]
        knee.fail_checks = [check_text(c) for c in failed]
        knee.fail_unjudged = bool(failed) and all(c.inconclusive for c in failed)
    if core.passes_again is not None:
        knee.passes_again_scale = pairs[core.passes_again][0].scale
    for s, t in pairs:
        if t.drop_rate is not None and t.drop_rate >= onset:
            knee.drop_onset_scale, knee.drop_onset_rps, knee.drop_onset_rate = s.scale, s.offered_rps, t.drop_rate
            knee.drop_onset_class = max(t.drop_by_class, key=lambda k: t.drop_by_class[k]) if t.drop_by_class else None
            break
    used = [s for s, _ in pairs]
    knee.sentence = knee_sentence(knee, used)
    if any(not s.valid for s in used):
        knee.sentence = knee.sentence[:-1] + caveat(used) + "."
    return knee


def knee_sentence(k: Knee, steps: Sequence[Step]) -> str:
    """The plain answer for one tier."""
    where = f" with {k.replicas} replica{'s' if k.replicas != 1 else ''}" if k.replicas else ""
    lowest = min(steps, key=lambda s: s.scale) if steps else None
    highest = max(steps, key=lambda s: s.scale) if steps else None
    if k.status == "no_slo":
        answer = f"{k.tier} has no SLO to judge{where}"
    elif k.status == "no_data":
        answer = f"{k.tier} sent no requests{where}"
    elif k.status == "always_passes":
        top = f"{text.rps(highest.offered_rps)} ({text.scale(highest.scale)})" if highest else "–"
        conf = "" if k.confident_pass else " (the pass at the top is not confident)"
        answer = f"{k.tier} holds its SLO at every load tested{where}, up to {top}{conf}"
    elif k.status == "never_passes":
        low = f"{text.rps(lowest.offered_rps)} ({text.scale(lowest.scale)})" if lowest else "–"
        why = f": {'; '.join(k.fail_checks)}" if k.fail_checks else ""
        if k.fail_unjudged:  # too few samples is no pass (fail closed), but no miss either: say which
            answer = (f"{k.tier} cannot be judged at the lowest load tested{where}, {low}{why}; "
                      "longer steps (--step-duration) give each step more requests")
        else:
            answer = f"{k.tier} misses its SLO already at the lowest load tested{where}, {low}{why}"
    else:
        conf = "confident" if k.confident_pass else "not confident: an interval crosses the threshold"
        why = f": {'; '.join(k.fail_checks)}" if k.fail_checks else ""
        fails = "cannot be judged from" if k.fail_unjudged else "fails from"
        answer = (f"{k.tier} holds its SLO up to {text.rps(k.knee_rps)}{where} ({text.scale(k.knee_scale)}; "
                  f"pass {conf}) and {fails} {text.rps(k.fail_rps)} ({text.scale(k.fail_scale)}{why})")
    if k.noisy and k.passes_again_scale is not None:
        answer += (f"; it passes again at {text.scale(k.passes_again_scale)}: the boundary is noisy, "
                   "rerun with longer steps")
    rows = [t for t in (s.tier(k.tier) for s in steps) if t is not None]
    worst = max((t.drop_rate or 0.0 for t in rows), default=0.0)
    if k.drop_onset_rps is not None and k.drop_onset_rate is not None:
        how = _CLASS_WORDS.get(k.drop_onset_class or "", "not served")
        answer += (f"; {k.tier} starts going unserved at {text.rps(k.drop_onset_rps)} "
                 f"({text.pct(k.drop_onset_rate, 1)} of its requests, mostly {how})")
    elif k.status not in ("no_data",):
        # "never dropped" only when every sent request of every step was served (fail closed)
        answer += (f"; {k.tier} is never dropped" if worst == 0 else
                 f"; {k.tier} stays under 1 % not served (at most {text.pct(worst, 2)})")
    cut = sum(t.unfinished for t in rows)
    if cut:
        answer += f"; {cut} of its requests were still unfinished when steps ended (counted as not served)"
    return answer + "."


# --------------------------------------------------------------------------- capacity answer


class CapacityAnswer(_Model):
    """How many replicas keep every tier within SLO at a target scale of today's peak."""

    target_scale: float
    target_rps: float | None
    replicas_needed: int | None
    per_replicas: dict[int, bool | None]  # None: the ladder does not reach the target
    failing: dict[int, list[str]] = Field(default_factory=dict)
    sentence: str


def _interp(steps: Sequence[Step], scale: float) -> float | None:
    pts = sorted((s.scale, s.offered_rps) for s in steps)
    if not pts:
        return None
    if scale <= pts[0][0]:
        return pts[0][1] * scale / pts[0][0] if pts[0][0] else pts[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x0 <= scale <= x1:
            return y0 + (y1 - y0) * (scale - x0) / (x1 - x0) if x1 > x0 else y0
    return pts[-1][1] * scale / pts[-1][0]


def capacity_answer(knees: Sequence[Knee], steps: Sequence[Step], target_scale: float) -> CapacityAnswer:
    """The smallest replica count at which every tier with an SLO still passes at ``target_scale``."""
    by_r: dict[int, list[Knee]] = {}
    for k in knees:
        by_r.setdefault(k.replicas or 1, []).append(k)
    per: dict[int, bool | None] = {}
    failing: dict[int, list[str]] = {}
    for r, ks in sorted(by_r.items()):
        top = max((s.scale for s in steps if (s.replicas or 1) == r), default=0.0)
        ok: bool | None = True
        for k in ks:
            if k.status in ("no_slo", "no_data"):
                continue
            holds = k.knee_scale is not None and k.knee_scale >= target_scale
            if k.status == "always_passes" and top < target_scale:
                ok = None if ok else ok
            elif not holds:
                ok = False
                failing.setdefault(r, []).append(k.tier)
        per[r] = ok
    needed = next((r for r, ok in sorted(per.items()) if ok), None)
    rps = _interp([s for s in steps if (s.replicas or 1) == (needed or min(per, default=1))], target_scale)
    load = f"{text.plain(target_scale)}× today's peak" + (f" (≈ {text.rps(rps)})" if rps else "")
    if needed is not None:
        fewer = [f"{r} fail{'s' if r == 1 else ''} ({', '.join(failing[r])})" for r in sorted(failing) if r < needed]
        sentence = f"{needed} replica{'s' if needed != 1 else ''} keep every tier within its SLO at {load}"
        sentence += ("; " + "; ".join(fewer) if fewer else "") + "."
    elif any(v is None for v in per.values()):
        sentence = f"The ladder does not reach {load}: extend --scale to answer."
    else:
        tried = ", ".join(str(r) for r in sorted(per))
        sentence = f"No replica count tried ({tried}) keeps every tier within its SLO at {load}."
    sentence = sentence[:-1] + caveat(steps, knees) + "."
    return CapacityAnswer(target_scale=target_scale, target_rps=rps, replicas_needed=needed, per_replicas=per,
                          failing=failing, sentence=sentence)


def caveat(steps: Sequence[Step], knees: Sequence[Knee] = ()) -> str:
    """' — but 6 of 8 steps were invalid and 2 passes are not confident', or empty: said in the same sentence."""
    parts = []
    bad = [s for s in steps if not s.valid]
    if bad:
        parts.append(f"{len(bad)} of {len(steps)} step{'s' if len(steps) != 1 else ''} "
                     f"{'was' if len(bad) == 1 else 'were'} invalid (scales "
                     f"{', '.join(text.scale(s.scale) for s in sorted(bad, key=lambda s: s.scale))})")
    unsure = [k for k in knees if k.status in ("within", "always_passes") and k.confident_pass is False]
    if unsure:
        parts.append(f"{len(unsure)} pass{'es are' if len(unsure) != 1 else ' is'} not confident "
                     f"({', '.join(sorted({k.tier for k in unsure}))})")
    return (" — but " + " and ".join(parts)) if parts else ""


class SweepResult(_Model):
    """``sweep.json``: every step, every tier's knee and the plain answers."""

    schema_: str = Field(default=SWEEP_SCHEMA, alias="schema")
    sweep_id: str
    scenario: str
    description: str = ""
    mode: str
    created_at: str
    step_duration_s: float | None = None
    warmup_s: float | None = None
    scales: list[float]
    replicas: list[int | None]
    steps: list[Step]
    knees: list[Knee]
    capacity: CapacityAnswer | None = None
    answers: list[str]
    notes: list[str] = Field(default_factory=list)
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def analyse_sweep(steps: Sequence[Step], *, sweep_id: str, scenario: str, mode: str, created_at: str,
                  target_scale: float | None = None, onset: float = 0.01, **extra: Any) -> SweepResult:
    """Knees of every tier at every replica count, the capacity answer and the plain sentences."""
    replicas = sorted({s.replicas for s in steps}, key=lambda r: (r is None, r or 0))
    tiers: list[str] = []
    for s in steps:
        for t in s.tiers:
            if t.tier not in tiers:
                tiers.append(t.tier)
    knees = [tier_knee([s for s in steps if s.replicas == r], name, r, onset) for r in replicas for name in tiers]
    answers = [k.sentence for k in knees]
    capacity = None
    if target_scale is not None and any(r is not None for r in replicas):
        capacity = capacity_answer(knees, steps, target_scale)
        answers.append(capacity.sentence)
    notes = [f"step {s.index} ({text.scale(s.scale)}) is invalid: {'; '.join(s.reasons)}" for s in steps if not s.valid]
    return SweepResult(sweep_id=sweep_id, scenario=scenario, mode=mode, created_at=created_at,
                       scales=sorted({s.scale for s in steps}), replicas=replicas, steps=list(steps), knees=knees,
                       capacity=capacity, answers=answers, notes=notes, **extra)


# --------------------------------------------------------------------------- the multi-tier study

# Published claims of "Beyond Binary Priorities" (docs/sources.md, from its README).
STUDY_CLAIMS = {
    "optimal_k": "Four priority tiers is consistently optimal (plateau beyond K = 5)",
    "top_speedup": "Up to ~3× better P99 latency for high-priority tenants",
    "cost_per_latency": "Cost per latency 46–68 % lower (10K requests; 24–53 % at 15K)",
    "saturation": "The benefit is largest at moderate load and fades near saturation",
}
EFFECT_X = 1.2  # a policy "has an effect" at a load when some K reaches this top-tier speedup
IMPORTANCE_DECAY = 0.5  # weight of tier p in the latency term: e^(-0.5 p), as the testbed's headroom λ


class StudyCell(_Model):
    """One run of the study grid."""

    k: int
    mix: str
    load: str
    policy: str
    run_dir: str
    run_id: str
    valid: bool
    replicas: int
    duration_s: float
    offered_rps: float
    requests: int
    served: int
    drop_rate: float | None
    top_tier: str
    top_requests: int
    top_e2e_p99_ms: float | None
    top_ttft_p99_ms: float | None
    weighted_e2e_p99_ms: float | None  # importance-weighted mean of per-tier P99 E2E
    cost_per_latency: float | None  # replica-seconds per served request × weighted P99 E2E (s)
    tier_e2e_p99_ms: list[float | None] = Field(default_factory=list)


def study_cell(summary: Summary, *, k: int, mix: str, load: str, policy: str, replicas: int,
               run_dir: str = "", duration_s: float | None = None) -> StudyCell:
    """Reduce one study run to its figures (tiers are taken most urgent first)."""
    duration = duration_s or summary.run.duration_s or 1.0
    if summary.measurement.measured_s:  # the tiers' counts cover the measured phases only (warm-up left out)
        duration = summary.measurement.measured_s
    tiers = summary.tiers
    served = sum(t.by_class.get("served", 0) for t in tiers)
    requests = sum(t.requests for t in tiers)
    dropped = sum(t.drop_rate.k for t in tiers)
    weights, values = [], []
    for p, t in enumerate(tiers):
        if t.latency.e2e_ms.p99 is not None:
            weights.append(math.exp(-IMPORTANCE_DECAY * p))
            values.append(t.latency.e2e_ms.p99)
    weighted = sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights) if weights else None
    cpl = (replicas * duration / served) * (weighted / 1000) if served and weighted is not None else None
    top = tiers[0]
    return StudyCell(
        k=k, mix=mix, load=load, policy=policy, run_dir=run_dir, run_id=summary.run.run_id,
        valid=summary.validity.valid, replicas=replicas, duration_s=duration, offered_rps=requests / duration,
        requests=requests, served=served, drop_rate=dropped / requests if requests else None, top_tier=top.name,
        top_requests=top.requests, top_e2e_p99_ms=top.latency.e2e_ms.p99, top_ttft_p99_ms=top.latency.ttft_ms.p99,
        weighted_e2e_p99_ms=weighted, cost_per_latency=cpl, tier_e2e_p99_ms=[t.latency.e2e_ms.p99 for t in tiers],
    )


class StudyRow(_Model):
    """One policy at one grid point, relative to fifo at the same point."""

    k: int
    mix: str
    load: str
    policy: str
    top_e2e_p99_ms: float | None
    fifo_top_e2e_p99_ms: float | None
    top_speedup: float | None  # fifo P99 / policy P99 of the top tier (>1 = better)
    cpl_gain: float | None  # 1 - CPL(policy) / CPL(fifo) (>0 = cheaper per latency)
    drop_rate: float | None
    excluded: str = Field(default="", description="why this row is left out of the verdicts (an invalid cell "
                          "or baseline); its ratios are then null")


class ClaimCheck(_Model):
    """A published claim beside our measurement."""

    key: str
    claim: str
    ours: str
    agrees: Literal["agrees", "partly", "disagrees", "inconclusive"]


class StudyResult(_Model):
    """``study.json``: the grid, every cell, the rows relative to fifo and the claims checked."""

    schema_: str = Field(default=STUDY_SCHEMA, alias="schema")
    study_id: str
    created_at: str
    grid: dict[str, list[Any]]
    runs: int
    cells: list[StudyCell]
    rows: list[StudyRow]
    best_k: dict[str, int | None]  # "<policy>/<load>" -> K with the largest mean top-tier speedup
    speedup_by_k: dict[str, dict[int, float | None]]  # "<policy>/<load>" -> K -> mean speedup
    claims: list[ClaimCheck]
    notes: list[str] = Field(default_factory=list)
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return sum(vals) / len(vals) if vals else None


def study_rows(cells: Sequence[StudyCell], baseline: str = "fifo") -> list[StudyRow]:
    """Each non-baseline cell against the baseline cell of the same (K, mix, load)."""
    base = {(c.k, c.mix, c.load): c for c in cells if c.policy == baseline}
    rows = []
    for c in cells:
        if c.policy == baseline:
            continue
        b = base.get((c.k, c.mix, c.load))
        speed = gain = None
        # verdicts come from valid cells only: an invalid run's latencies say nothing about the policy
        excluded = ("invalid cell" if not c.valid else
                    f"invalid {baseline} baseline" if b is not None and not b.valid else "")
        if excluded:
            b_shown = b.top_e2e_p99_ms if b else None
            rows.append(StudyRow(k=c.k, mix=c.mix, load=c.load, policy=c.policy, top_e2e_p99_ms=c.top_e2e_p99_ms,
                                 fifo_top_e2e_p99_ms=b_shown, top_speedup=None, cpl_gain=None,
                                 drop_rate=c.drop_rate, excluded=excluded))
            continue
        if b is not None and b.top_e2e_p99_ms and c.top_e2e_p99_ms:
            speed = b.top_e2e_p99_ms / c.top_e2e_p99_ms
        if b is not None and b.cost_per_latency and c.cost_per_latency is not None:
            gain = 1 - c.cost_per_latency / b.cost_per_latency
        rows.append(StudyRow(k=c.k, mix=c.mix, load=c.load, policy=c.policy, top_e2e_p99_ms=c.top_e2e_p99_ms,
                             fifo_top_e2e_p99_ms=b.top_e2e_p99_ms if b else None, top_speedup=speed,
                             cpl_gain=gain, drop_rate=c.drop_rate))
    return rows


def check_claims(rows: Sequence[StudyRow], policy: str = "headroom", moderate: str = "moderate",
                 saturated: str = "saturated") -> tuple[list[ClaimCheck], dict[str, int | None],
                                                         dict[str, dict[int, float | None]]]:
    """Our figures beside each published claim, with an explicit agreement rule per claim."""
    by_key: dict[str, dict[int, list[float | None]]] = {}
    for r in rows:
        by_key.setdefault(f"{r.policy}/{r.load}", {}).setdefault(r.k, []).append(r.top_speedup)
    speedup_by_k = {key: {k: _mean(v) for k, v in sorted(ks.items())} for key, ks in by_key.items()}
    best_k: dict[str, int | None] = {}
    for key, ks in speedup_by_k.items():
        multi = {k: v for k, v in ks.items() if v is not None and k > 1}
        best_k[key] = max(multi, key=lambda k: multi[k]) if multi else None
    claims: list[ClaimCheck] = []
    # The optimal K is judged only at loads where the policy has an effect at all (some K with a mean
    # top-tier speedup of at least EFFECT_X): where nothing queues, the best K is noise.
    parts, judged = [], []
    for key in sorted(k for k in speedup_by_k if k.startswith(f"{policy}/")):
        curve = ", ".join(f"K={k}: {text.times(v, 2)}" for k, v in speedup_by_k[key].items() if k > 1)
        effect = max((v for k, v in speedup_by_k[key].items() if k > 1 and v is not None), default=0.0)
        load_name = key.split("/", 1)[1]
        note = "" if effect >= EFFECT_X else " (no effect: not judged)"
        parts.append(f"{load_name}: {curve or '–'}; best K = {best_k.get(key) or '–'}{note}")
        if effect >= EFFECT_X:
            judged.append((best_k.get(key), speedup_by_k[key]))
    if not judged:
        verdict: Literal["agrees", "partly", "disagrees", "inconclusive"] = "inconclusive"
    elif all(best == 4 for best, _ in judged):
        verdict = "agrees"
    elif any(best == 4 or ((curve.get(4) or 0) >= 0.9 * (curve.get(best or 0) or 0)) for best, curve in judged):
        verdict = "partly"
    else:
        verdict = "disagrees"
    claims.append(ClaimCheck(key="optimal_k", claim=STUDY_CLAIMS["optimal_k"],
                             ours=f"{policy}, mean top-tier P99 E2E speedup vs fifo — " + " | ".join(parts),
                             agrees=verdict))
    pol = [r for r in rows if r.policy == policy and r.top_speedup is not None]
    top_speed = max((r.top_speedup for r in pol if r.top_speedup is not None), default=None)
    where = next((r for r in pol if r.top_speedup == top_speed), None)
    if top_speed is None or top_speed < EFFECT_X:
        verdict = "inconclusive"  # nothing queued anywhere: there was no effect to measure
    elif top_speed >= 2.0:
        verdict = "agrees"
    elif top_speed >= 1.3:
        verdict = "partly"
    else:
        verdict = "disagrees"
    at = f" (K={where.k}, {where.mix} mix, {where.load} load)" if where else ""
    claims.append(ClaimCheck(key="top_speedup", claim=STUDY_CLAIMS["top_speedup"],
                             ours=f"up to {text.times(top_speed, 2)} for the top tier with {policy}{at}",
                             agrees=verdict))
    texts, ranges = [], []
    for load_name in sorted({r.load for r in rows}):
        gains = sorted(r.cpl_gain for r in rows
                       if r.policy == policy and r.load == load_name and r.k > 1 and r.cpl_gain is not None)
        speedups = [v for k, v in speedup_by_k.get(f"{policy}/{load_name}", {}).items() if k > 1 and v is not None]
        effect = max(speedups, default=0.0) >= EFFECT_X
        if gains:
            if effect:  # as for the optimal K: where the policy changed nothing, its cost figure is noise
                ranges.append((gains[0], gains[-1]))
            median = text.pct(gains[len(gains) // 2], 0)
            texts.append(f"{load_name}: {text.pct(gains[0], 0)} … {text.pct(gains[-1], 0)} (median {median})"
                         + ("" if effect else " (no effect: not judged)"))
    ours = f"cost per latency lower by, {policy}, K > 1 — " + "; ".join(texts) if texts else "–"
    if not ranges:
        verdict = "inconclusive"
    elif any(lo <= 0.68 and hi >= 0.46 for lo, hi in ranges):
        verdict = "agrees"
    elif any(hi >= 0.24 for _, hi in ranges):
        verdict = "partly"
    else:
        verdict = "disagrees"
    claims.append(ClaimCheck(key="cost_per_latency", claim=STUDY_CLAIMS["cost_per_latency"], ours=ours,
                             agrees=verdict))
    m = _mean([r.top_speedup for r in rows if r.policy == policy and r.load == moderate and r.k > 1])
    s = _mean([r.top_speedup for r in rows if r.policy == policy and r.load == saturated and r.k > 1])
    if m is None or s is None:
        verdict = "inconclusive"
    elif s < m:
        verdict = "agrees"
    else:
        verdict = "disagrees"
    claims.append(ClaimCheck(key="saturation", claim=STUDY_CLAIMS["saturation"],
                             ours=f"mean top-tier speedup {text.times(m, 2)} at moderate load, "
                                  f"{text.times(s, 2)} near saturation ({policy}, K > 1)",
                             agrees=verdict))
    return claims, best_k, speedup_by_k


OUTLIER_X = 1.5  # a baseline cell this far from its (mix, load) median across K is an outlier


def baseline_outliers(cells: Sequence[StudyCell], baseline: str = "fifo") -> list[str]:
    """Valid baseline cells whose top-tier P99 E2E is ≥ 1.5× off the median of the same (mix, load) over K.

    FIFO ignores tiers, so its top-tier latency should not depend on K: a cell far from the others
    is noise that would make any policy look good or bad at that K.
    """
    groups: dict[tuple[str, str], list[StudyCell]] = {}
    for c in cells:
        if c.policy == baseline and c.valid and c.top_e2e_p99_ms:
            groups.setdefault((c.mix, c.load), []).append(c)
    out = []
    for (mix, load), group in sorted(groups.items()):
        if len(group) < 3:
            continue
        values = sorted(c.top_e2e_p99_ms or 0.0 for c in group)
        median = values[len(values) // 2]
        for c in sorted(group, key=lambda c: c.k):
            ratio = (c.top_e2e_p99_ms or 0.0) / median if median else 1.0
            if ratio >= OUTLIER_X or ratio <= 1 / OUTLIER_X:
                out.append(f"{baseline} K={c.k} ({mix} mix, {load} load): top-tier P99 E2E "
                           f"{text.ms(c.top_e2e_p99_ms or 0.0)} vs a median of {text.ms(median)} over K")
    return out


def own_trend(cells: Sequence[StudyCell], policy: str) -> dict[str, dict[int, float | None]]:
    """The policy's own mean top-tier P99 E2E (ms) per K, per load, from valid cells."""
    by: dict[str, dict[int, list[float | None]]] = {}
    for c in cells:
        if c.policy == policy and c.valid:
            by.setdefault(c.load, {}).setdefault(c.k, []).append(c.top_e2e_p99_ms)
    return {load: {k: _mean(v) for k, v in sorted(ks.items())} for load, ks in by.items()}


def _own_check(claim: ClaimCheck, trend: dict[str, dict[int, float | None]]) -> ClaimCheck:
    """The optimal-K claim also needs the policy's own top-tier P99 to stop improving at K = 4."""
    texts, against = [], False
    for load, ks in sorted(trend.items()):
        multi = {k: v for k, v in ks.items() if k > 1 and v is not None}
        if not multi or 4 not in multi:
            continue
        best = min(multi, key=lambda k: multi[k])
        texts.append(f"{load}: best own K = {best}")
        if best > 4 and multi[best] < 0.9 * multi[4]:
            against = True  # still falling clearly beyond 4: the "optimum" came from the baseline
    if not texts:
        return claim
    verdict = claim.agrees
    if against and verdict == "agrees":
        verdict = "partly"
    return claim.model_copy(update={"ours": claim.ours + " | the policy's own top-tier P99 E2E — "
                                    + "; ".join(texts), "agrees": verdict})


def analyse_study(cells: Sequence[StudyCell], *, study_id: str, created_at: str, grid: dict[str, list[Any]],
                  policy: str = "headroom", notes: Sequence[str] = ()) -> StudyResult:
    """Rows against fifo (valid cells only), the best K per policy and load, and the claims checked.

    The claims name how many cells were invalid and any baseline cell that is an outlier, in the
    same line, and the optimal K is also checked on the policy's own trend.
    """
    rows = study_rows(cells)
    claims, best_k, speedup_by_k = check_claims(rows, policy)
    claims = [_own_check(c, own_trend(cells, policy)) if c.key == "optimal_k" else c for c in claims]
    invalid = [c for c in cells if not c.valid]
    outliers = baseline_outliers(cells)
    caveats = []
    if invalid:
        caveats.append(f"{len(invalid)} of {len(cells)} cells were invalid and left out")
    if outliers:
        caveats.append(f"outlier baseline cell(s): {'; '.join(outliers)}")
    if caveats:
        tail = " (" + "; ".join(caveats) + ")"
        claims = [c.model_copy(update={"ours": c.ours + tail}) for c in claims]
    all_notes = list(notes) + [f"outlier baseline: {o}" for o in outliers]
    if invalid:
        all_notes.append(f"{len(invalid)} of {len(cells)} cells invalid: excluded from every verdict")
    return StudyResult(study_id=study_id, created_at=created_at, grid=grid, runs=len(cells), cells=list(cells),
                       rows=rows, best_k=best_k, speedup_by_k=speedup_by_k, claims=claims, notes=all_notes)
