"""The priority control: which requests get an equal-priority twin, and how a twin travels (pure functions).

A sampled logical request is sent twice at (nearly) the same moment: once as its tier, once as a
*twin* with the same prompt and ``max_tokens`` at a neutral priority. The audit pairs them
(``twin_of``) and asks whether the tier's own priority changed anything (docs/audit.md).

Neutral, per stack profile: a body ``priority`` (vLLM, SGLang) gets the control's ``priority``, by
default the midpoint of the scenario's tier priorities (rounded down), sent with the stack's
polarity; an objective or priority header (llm-d, GAIE, SMG) is left out, so the stack applies its
default priority (llm-d: 0), unless the control names an ``objective``; ``service_tier`` (OpenAI) is
left out. Everything else (credential, tenant fairness header, the tier's own headers and body) is kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from rushhour import stacks
from rushhour.loadgen.tiers import TierWire, map_tier, priority_fields
from rushhour.scenarios.model import Control, Scenario, Tier

# The second of a pair leaves this long after the first; which one goes first is a fair coin per pair,
# so a first-come-first-served server favours neither side on average (a fixed order would). 20 ms, not
# less: the twin opens its own connection and a busy server accepts it late, a few ms that must not
# decide the order (with 2 ms, real vLLM under fcfs served the tier first in 58 % of 222 pairs).
STAGGER_S = 0.02


def control_of(scenario: Scenario, tier: str) -> Control | None:
    """The control that applies to ``tier``: its own, else the scenario's, else none."""
    return scenario.control_for(tier)


def neutral_priority(scenario: Scenario, control: Control) -> int:
    """The twins' priority in rushhour's polarity: the control's, else the tiers' midpoint rounded down."""
    return scenario.neutral_priority(control)


def _unit(*parts: object) -> float:
    """A stable uniform number in [0, 1) from ``parts`` (the same request decides the same way everywhere)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def sampled(logical_id: str, share: float, seed: int = 0) -> bool:
    """Does this logical request get a twin (a ``share`` of them do)?"""
    return share > 0 and _unit(seed, "control", logical_id) < share


def twin_first(logical_id: str, seed: int = 0) -> bool:
    """Does the twin leave before the original (a fair coin per pair)?"""
    return _unit(seed, "order", logical_id) < 0.5


def control_wire(
    tier: Tier, tenant: str, profile: str, dialect: str, control: Control, neutral: int,
    *, credential_override: str | None = None,
) -> TierWire:
    """How a twin of ``tier`` travels: the tier's wire with its priority replaced by the neutral one."""
    wire = stacks.get(profile).wire
    base = map_tier(tier, tenant, profile, dialect, credential_override=credential_override)
    headers = dict(base.headers)
    body = dict(base.body)
    for name in (wire.objective_header, wire.priority_header):
        if name:
            if control.objective:
                headers[name] = control.objective
            else:
                headers.pop(name, None)
    body.pop("service_tier", None)
    neutral_tier = tier.model_copy(update={"priority": neutral})
    body.update(priority_fields(profile, neutral_tier, body))
    return replace(base, headers=headers, body=body)
