"""Per-tier Pareto of a sweep: output tokens/s per user against per replica, and which steps are on the frontier.

vLLM's and AIPerf's frontier plots one class of traffic; here each tier has its own. A step's point for a tier:
*per user* is a served stream's decode speed, 1000 / the tier's TPOT p50 (ms); *per replica* is the tier's output
tokens/s (served attempts' reported tokens over the measured window) over the step's replica count, or over the
whole stack when the sweep did not set one (``replicas`` None: the scenario's own). A point is on the frontier when
no other step of the tier is at least as good on both and better on one. Pure: sweep steps in, points out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rushhour.studies.knee import Step


@dataclass(frozen=True)
class ParetoPoint:
    """One tier at one step."""

    tier: str
    step: int
    scale: float
    replicas: int | None
    per_user: float  # output tokens/s a served stream decodes at (1000 / TPOT p50)
    per_replica: float  # the tier's output tokens/s per replica (per stack when replicas is None)
    frontier: bool


def pareto_points(steps: Sequence[Step]) -> list[ParetoPoint]:
    """Every (tier, step) with both figures, the frontier marked per tier; tiers in first-seen order."""
    raw: list[tuple[str, int, float, int | None, float, float]] = []
    for s in steps:
        for t in s.tiers:
            if t.tpot_p50_ms is None or t.tpot_p50_ms <= 0 or t.output_tokens_per_s is None:
                continue  # no served stream with two tokens, or no reported tokens: no point (never a guess)
            raw.append((t.tier, s.index, s.scale, s.replicas, 1000.0 / t.tpot_p50_ms,
                        t.output_tokens_per_s / (s.replicas or 1)))
    out = []
    for tier, step, scale, replicas, user, replica in raw:
        dominated = any(o[0] == tier and o[4] >= user and o[5] >= replica and (o[4] > user or o[5] > replica)
                        for o in raw)
        out.append(ParetoPoint(tier, step, scale, replicas, round(user, 3), round(replica, 3), not dominated))
    return out
