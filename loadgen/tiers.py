"""Tier → wire mapping per stack profile: credentials, headers and body fields (pure functions).

rushhour's tier priority is "higher = more urgent" (llm-d's polarity). What each stack expects is its
profile's ``Wire`` (stacks/<name>.py): vLLM's body ``priority`` is "lower = earlier", so it is sent
negated; SGLang's default is "higher = earlier", so it is sent as is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rushhour import stacks
from rushhour.records.record import fingerprint, register_secret
from rushhour.scenarios.model import Tier

ANTHROPIC_VERSION = "2023-06-01"


class TierError(ValueError):
    """A tier cannot be mapped for this stack (unknown profile, missing credential)."""


@dataclass(frozen=True, slots=True)
class TierWire:
    """Everything a request of one (tier, tenant) carries on the wire for one route."""

    tier: str
    tenant: str
    headers: dict[str, str] = field(default_factory=dict)  # includes the credential header, if any
    body: dict[str, Any] = field(default_factory=dict)
    key_fingerprint: str = ""


def credential(tier: Tier, env: Mapping[str, str] | None = None, override: str | None = None) -> str | None:
    """The API key named by ``env:VAR`` (the route's ``override`` first), read at run time."""
    name = override or tier.credential
    if name is None:
        return None
    if not name.startswith("env:"):
        raise TierError(f"tier {tier.name!r}: credential must be 'env:VARIABLE', not a literal")
    var = name[4:]
    value = (os.environ if env is None else env).get(var)
    if not value:
        raise TierError(f"tier {tier.name!r}: environment variable {var} (credential) is not set")
    register_secret(value)
    return value


def _own_headers(tier: Tier, env: Mapping[str, str] | None) -> dict[str, str]:
    """The tier's extra headers; an ``env:VAR`` value is read now and redacted wherever it shows up."""
    out: dict[str, str] = {}
    for name, value in tier.headers.items():
        if value.startswith("env:"):
            var = value[4:]
            value = (os.environ if env is None else env).get(var, "")
            if not value:
                raise TierError(f"tier {tier.name!r}: environment variable {var} (header {name}) is not set")
            register_secret(value)
        out[name] = value
    return out


def _polarised(polarity: str | None, priority: int) -> int | None:
    if polarity == "negated":
        return -priority  # e.g. vLLM: lower value = more urgent
    if polarity == "as_is":
        return priority  # e.g. SGLang default: higher value = more urgent
    return None


def priority_field(profile: str, tier: Tier) -> int | None:
    """The body ``priority`` a model server expects for this tier, or None if the stack has none."""
    return _polarised(stacks.get(profile).wire.priority_body, tier.priority)


def priority_fields(profile: str, tier: Tier, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The body fields that carry the tier's priority: ``priority`` and/or ``extra_body.priority``.

    ``extra_body`` is merged into the one ``body`` already holds (a tier's own extra fields stay).
    """
    wire = stacks.get(profile).wire
    out: dict[str, Any] = {}
    top = _polarised(wire.priority_body, tier.priority)
    if top is not None:
        out["priority"] = top
    extra = _polarised(wire.priority_extra_body, tier.priority)
    if extra is not None:
        held = (body or {}).get("extra_body")
        out["extra_body"] = {**(held if isinstance(held, Mapping) else {}), "priority": extra}
    return out


def map_tier(
    tier: Tier,
    tenant: str,
    profile: str,
    dialect: str,
    *,
    env: Mapping[str, str] | None = None,
    credential_override: str | None = None,
) -> TierWire:
    """Headers and body fields for a request of ``tier`` and ``tenant`` to a stack of ``profile``."""
    if profile not in stacks.NAMES:
        raise TierError(f"unknown stack profile {profile!r} (known: {', '.join(stacks.NAMES)})")
    wire = stacks.get(profile).wire
    headers: dict[str, str] = {}
    body: dict[str, Any] = {}
    objective = tier.objective or tier.name
    if wire.objective_header:
        headers[wire.objective_header] = objective
    if wire.fairness_header:
        headers[wire.fairness_header] = tenant
    if wire.priority_header:
        headers[wire.priority_header] = objective
    body.update(priority_fields(profile, tier))
    if wire.service_tier and tier.service_tier:
        body["service_tier"] = tier.service_tier
    key = credential(tier, env, credential_override)
    anthropic_style = dialect == "anthropic-messages" or wire.anthropic_auth
    if anthropic_style:
        headers["anthropic-version"] = ANTHROPIC_VERSION
    if key is not None:
        if anthropic_style:
            headers["x-api-key"] = key
        else:
            headers["authorization"] = f"Bearer {key}"
    headers.update(_own_headers(tier, env))
    ours = body.get("extra_body")
    body.update(tier.body)
    if isinstance(ours, dict) and isinstance(tier.body.get("extra_body"), Mapping):
        body["extra_body"] = {**ours, **tier.body["extra_body"]}  # the tier's own extra fields win, ours stay
    return TierWire(tier.name, tenant, headers, body, fingerprint(key) if key else "")


def map_all(
    tiers: list[Tier], profile: str, dialect: str, env: Mapping[str, str] | None = None
) -> dict[tuple[str, str], TierWire]:
    """Every (tier, tenant) of a scenario: validates the whole mapping before any request is sent."""
    return {
        (tier.name, tenant): map_tier(tier, tenant, profile, dialect, env=env)
        for tier in tiers
        for tenant in tier.tenant_ids
    }


def pins_output(route_pins: bool, tools: object) -> bool:
    """Whether one request asks for exactly ``max_tokens`` (``min_tokens`` + ``ignore_eos``): where the route
    pins, except a request that offers tools. A tool call ends when the model closes it; pinned, vLLM's
    tool-call grammar pads it to ``max_tokens`` and no call finishes (real vLLM 0.32, hermes parser: 60 of
    60 answers cut at ``length``, the same requests unpinned 10 of 10 ``tool_calls``)."""
    return route_pins and not tools
