"""Capacity plans: per scale of the workload, the smallest replica count meeting every SLO, and its GPU-hours.

Pure functions over the steps of a (replicas × scale) grid (``audit.knee.Step``, one audited run each,
simulated in virtual time by ``rushhour plan``). Fail closed: a scale at which no replica count tried
meets every tier's SLO says so, and so does a cell that could not be judged (invalid, or not run).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from rushhour.audit import text
from rushhour.scenarios.planner import Recommendation
from rushhour.studies.knee import Step, SweepResult, check_text

PLAN_SCHEMA = "rushhour.plan/1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScaleAnswer(_Model):
    """One scale of the workload: how many replicas it needs."""

    scale: float
    offered_rps: float | None = Field(description="logical requests per second the clients issued at this scale (all "
                                      "tiers, retries folded) in the cell of `offered_at_replicas`")
    offered_at_replicas: int | None = Field(default=None, description="the cell `offered_rps` was measured in: the "
                                            "answering replica count, else the largest replica count run")
    offered_rps_by_replicas: dict[str, float] = Field(
        default_factory=dict, description="replicas → requests per second issued in that cell; closed-loop personas "
        "(agents, multi-turn chat) issue their next request only after an answer, so the rate grows with replicas")
    replicas_needed: int | None = Field(description="the smallest replica count tried at which every tier with an "
                                        "SLO passed (null: none did)")
    gpu_hours_per_hour: float | None = Field(description="replicas × GPUs per replica, per hour of this traffic")
    cost_per_hour: float | None = Field(default=None, description="gpu_hours_per_hour × --gpu-hour-price")
    failing: dict[str, list[str]] = Field(default_factory=dict, description="replicas → tiers failing there")
    unjudged: list[int] = Field(default_factory=list, description="replica counts whose cell was invalid or not run")
    sentence: str


class TierPlan(_Model):
    """One tier across the grid."""

    tier: str
    knee_scale: dict[str, float | None] = Field(description="replicas → the highest scale tried at which the "
                                                "tier met its SLO (null: not even the lowest)")
    min_replicas: dict[str, int | None] = Field(description="scale → the smallest replicas meeting this tier's SLO")


class PlannerCheck(_Model):
    """An imported llm-d-planner recommendation: its own profile, then the tiered mix, on its replica count."""

    source: str
    model: str
    gpu: str
    tensor_parallel: int
    replicas: int = Field(description="the planner's replica count")
    preset: str = Field(description="the testbed preset that stood in for the planner's GPU and model")
    profile: str = Field(description="the planner's traffic profile and SLOs, in words")
    mix: str = Field(description="the tiered mix it was held to, in words")
    profile_status: str = Field(description="pass | fail | not judged: the planner's profile alone")
    profile_failing: list[str] = Field(default_factory=list)
    mix_status: str = Field(description="pass | fail | not judged: the tiered mix on the planner's replica count")
    mix_failing: list[str] = Field(default_factory=list)
    mix_replicas_needed: int | None = Field(default=None, description="the smallest replica count tried at which "
                                            "the mix met every SLO (scale 1; null: none tried did)")
    planner_predicted: dict[str, float] = Field(default_factory=dict)
    sentence: str


def _verdict(step: Step | None) -> tuple[str, list[str]]:
    """A cell's standing: fail closed — invalid, missing or unjudged is 'not judged', never a pass."""
    if step is None or not step.valid:
        return "not judged", ([f"invalid run: {'; '.join(step.reasons)}"] if step is not None else [])
    failing = [f"{t.tier} {check_text(c)}" for t in step.tiers for c in t.checks if not c.passed]
    if failing:
        return "fail", failing
    judged = [t for t in step.tiers if t.status == "pass"]
    return ("pass", []) if judged and all(t.status in ("pass", "no_slo") for t in step.tiers) else ("not judged", [])


def planner_check(rec: Recommendation, profile: Step | None, mix: Step | None, mix_needed: int | None,
                  mix_text: str) -> PlannerCheck:
    """The planner's replica count held to its own profile and to the tiered mix, said in one sentence."""
    p_status, p_failing = _verdict(profile)
    m_status, m_failing = _verdict(mix)
    n = rec.replicas
    slo = (f"TTFT {rec.percentile} ≤ {text.ms(rec.ttft_ms)}, ITL {rec.percentile} ≤ {text.ms(rec.itl_ms)}")
    profile_text = (f"{text.rps(rec.qps)} of {rec.prompt_tokens} in / {rec.output_tokens} out tokens; {slo}")
    head = (f"llm-d-planner's recommendation ({rec.model} on {n} × {rec.gpu}, TP {rec.tensor_parallel}, simulated "
            f"as {n} × {rec.preset}): ")
    words = {"pass": "meets its SLOs", "fail": "misses its SLOs", "not judged": "could not be judged"}
    sentence = head + f"its own profile ({profile_text}) {words[p_status]} on {n} replica{'s' if n != 1 else ''}"
    sentence += f" ({'; '.join(p_failing)})" if p_failing else ""
    mix_words = {"pass": "meets every tier's SLO", "fail": "does not", "not judged": "could not be judged"}
    sentence += f"; under the tiered mix ({mix_text}) it {mix_words[m_status]}"
    sentence += f" ({'; '.join(m_failing)})" if m_failing else ""
    if m_status != "pass":
        sentence += (f"; {mix_needed} replicas meet every tier's SLO under the mix" if mix_needed is not None
                     else "; no replica count tried meets every tier's SLO under the mix")
    sentence += "."
    return PlannerCheck(source=rec.source, model=rec.model, gpu=rec.gpu, tensor_parallel=rec.tensor_parallel,
                        replicas=n, preset=rec.preset, profile=profile_text, mix=mix_text, profile_status=p_status,
                        profile_failing=p_failing, mix_status=m_status, mix_failing=m_failing,
                        mix_replicas_needed=mix_needed, planner_predicted=dict(rec.predicted), sentence=sentence)


class PlanResult(_Model):
    """``plan.json``: the grid, the per-scale answers, the per-tier knees."""

    schema_: str = Field(default=PLAN_SCHEMA, alias="schema")
    plan_id: str
    scenario: str
    mode: str = "simulated"
    created_at: str
    replicas: list[int]
    scales: list[float]
    duration_s: float
    preset: str
    gpus_per_replica: int = 1
    gpu_hour_price: float | None = None
    answers: list[ScaleAnswer]
    tiers: list[TierPlan]
    sentences: list[str]
    all_answered: bool = Field(description="every scale has a replica count meeting every SLO")
    sweep: SweepResult
    notes: list[str] = Field(default_factory=list)
    planner: PlannerCheck | None = Field(default=None, description="plan --from-planner: the imported "
                                         "recommendation held to its profile and to the tiered mix")
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _judged(tiers_status: Sequence[str]) -> bool:
    return all(s in ("pass", "fail", "no_slo") for s in tiers_status)


# Rates across replica counts within this share of each other are "the same" (a seeded open-loop workload
# differs only by what a slot limit turned away).
_SAME_RATE = 0.05


def rate_varies(rates: Iterable[float]) -> bool:
    """Did the rate issued depend on the replica count (beyond a slot limit's noise)?"""
    values = list(rates)
    return bool(values) and max(values) > min(values) * (1 + _SAME_RATE)


def _issued(rps: float | None, at: int | None, by_replicas: dict[int, float]) -> str:
    """What the clients issued, said exactly: at which replica count, and whether the rate depended on it."""
    if rps is None or at is None:
        return ""
    if len(by_replicas) == 1:
        return f" ({text.rps(rps)} issued on {at} replica{'s' if at != 1 else ''})"
    if not rate_varies(by_replicas.values()):
        return f" ({text.rps(rps)} issued, about the same on every replica count run)"
    low, high = min(by_replicas.values()), max(by_replicas.values())
    lo_r, hi_r = min(by_replicas), max(by_replicas)
    return (f" ({text.rps(rps)} issued on {at} replica{'s' if at != 1 else ''}; {text.rps(low)} to "
            f"{text.rps(high)} across {lo_r}–{hi_r} replicas: closed-loop personas issue more when "
            "answered faster)")


def scale_answer(steps: Sequence[Step], scale: float, replicas: Sequence[int], gpus_per_replica: int = 1,
                 price: float | None = None) -> ScaleAnswer:
    """The smallest replica count whose cell at ``scale`` passed every tier with an SLO (valid runs only)."""
    at = {s.replicas: s for s in steps if s.scale == scale and s.replicas is not None}
    failing: dict[str, list[str]] = {}
    unjudged: list[int] = []
    needed: int | None = None
    for r in sorted(replicas):
        step = at.get(r)
        if step is None or not step.valid or not _judged([t.status for t in step.tiers]):
            unjudged.append(r)
            continue
        bad = [t.tier for t in step.tiers if t.status == "fail"]
        if bad:
            failing[str(r)] = bad
            continue
        if any(t.status == "pass" for t in step.tiers):
            needed = r
            break
        unjudged.append(r)  # no tier has an SLO: nothing to size for
    by_replicas = {r: at[r].offered_rps for r in sorted(at)}
    offered_at = needed if needed is not None else (max(by_replicas) if by_replicas else None)
    rps = by_replicas.get(offered_at) if offered_at is not None else None
    load = f"{text.plain(scale)}× the workload" + _issued(rps, offered_at, by_replicas)
    gpu_h = needed * gpus_per_replica if needed is not None else None
    if needed is not None:
        sentence = (f"At {load}, {needed} replica{'s' if needed != 1 else ''} meet every SLO "
                    f"({text.plain(float(gpu_h or 0))} GPU-hours per hour")
        sentence += f", {text.money(price * gpu_h)} per hour)." if price is not None and gpu_h is not None else ")."
    else:
        tried = ", ".join(str(r) for r in sorted(replicas))
        sentence = f"At {load}, no replica count tried ({tried}) meets every SLO"
        worst = sorted({t for ts in failing.values() for t in ts})
        sentence += f": {', '.join(worst)} fail" if worst else ""
        sentence += f" ({len(unjudged)} cell{'s' if len(unjudged) != 1 else ''} not judged)." if unjudged else "."
    return ScaleAnswer(scale=scale, offered_rps=rps, offered_at_replicas=offered_at,
                       offered_rps_by_replicas={str(r): v for r, v in by_replicas.items()},
                       replicas_needed=needed, gpu_hours_per_hour=gpu_h,
                       cost_per_hour=(price * gpu_h) if price is not None and gpu_h is not None else None,
                       failing=failing, unjudged=unjudged, sentence=sentence)


def tier_plan(steps: Sequence[Step], tier: str, replicas: Sequence[int], scales: Sequence[float]) -> TierPlan:
    """A tier's knee (highest passing scale before its first failure) per replica count, and its own minimum."""
    knee: dict[str, float | None] = {}
    for r in sorted(replicas):
        best: float | None = None
        for s in sorted(scales):
            step = next((x for x in steps if x.replicas == r and x.scale == s), None)
            row = step.tier(tier) if step is not None else None
            if step is None or row is None or not step.valid or row.status != "pass":
                break
            best = s
        knee[str(r)] = best
    need: dict[str, int | None] = {}
    for s in sorted(scales):
        found = None
        for r in sorted(replicas):
            step = next((x for x in steps if x.replicas == r and x.scale == s), None)
            row = step.tier(tier) if step is not None else None
            if step is not None and row is not None and step.valid and row.status == "pass":
                found = r
                break
        need[text.plain(s)] = found
    return TierPlan(tier=tier, knee_scale=knee, min_replicas=need)


def analyse_plan(steps: Sequence[Step], sweep: SweepResult, *, plan_id: str, scenario: str, created_at: str,
                 replicas: Sequence[int], scales: Sequence[float], duration_s: float, preset: str,
                 gpus_per_replica: int = 1, price: float | None = None, notes: Sequence[str] = (),
                 planner: PlannerCheck | None = None) -> PlanResult:
    """Every scale's answer and every tier's knees; ``all_answered`` is False if any scale has none."""
    answers = [scale_answer(steps, s, replicas, gpus_per_replica, price) for s in sorted(scales)]
    tiers = list(dict.fromkeys(t.tier for s in steps for t in s.tiers))
    plans = [tier_plan(steps, t, replicas, scales) for t in tiers]
    sentences = ([planner.sentence] if planner is not None else []) + [a.sentence for a in answers]
    for p in plans:
        held = {int(r): k for r, k in p.knee_scale.items()}
        parts = [f"{r}: {text.plain(k)}×" if k is not None else f"{r}: below {text.plain(min(scales))}×"
                 for r, k in sorted(held.items())]
        sentences.append(f"{p.tier} meets its SLO up to (replicas: scale) " + ", ".join(parts) + ".")
    notes = list(notes)
    for lower, higher in itertools.pairwise(answers):
        if lower.replicas_needed is not None and higher.replicas_needed is not None and \
                higher.replicas_needed < lower.replicas_needed:
            notes.append(f"{text.plain(higher.scale)}× needs fewer replicas ({higher.replicas_needed}) than "
                         f"{text.plain(lower.scale)}× ({lower.replicas_needed}): either the stack is not monotone in "
                         "load there (llm-d, for one, applies priority only while the pool is saturated) or a "
                         "verdict near its threshold is noisy at this run length — read those cells")
    return PlanResult(plan_id=plan_id, scenario=scenario, created_at=created_at, replicas=sorted(replicas),
                      scales=sorted(scales), duration_s=duration_s, preset=preset, gpus_per_replica=gpus_per_replica,
                      gpu_hour_price=price, answers=answers, tiers=plans, sentences=sentences,
                      all_answered=all(a.replicas_needed is not None for a in answers), sweep=sweep,
                      notes=list(notes), planner=planner)
