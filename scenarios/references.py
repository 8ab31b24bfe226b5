"""Names one part of a scenario gives another (a persona's tier, an SLO's phase, a budget's tier), checked on
the YAML's plain data: so the loader reports them located and beside every field error, not after them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rushhour.scenarios.names import did_you_mean

Loc = tuple[str | int, ...]
DEFAULT_PHASES = ["steady"]  # Scenario.phases' default


@dataclass(frozen=True)
class Reference:
    """One name that refers to nothing (or twice to one thing), where it stands, and the nearest valid name."""

    loc: Loc
    message: str
    hint: str = ""


def _items(value: Any) -> list[tuple[int, Mapping[str, Any]]]:
    """(index, mapping) of a list's mappings; anything else is a field error of its own, reported elsewhere."""
    return [(i, item) for i, item in enumerate(value) if isinstance(item, Mapping)] if isinstance(value, list) else []


def _names(section: str, items: list[tuple[int, Mapping[str, Any]]]) -> tuple[list[str], list[Reference]]:
    """The section's names (strings only) and a problem for each name given twice."""
    names: list[str] = []
    twice: list[Reference] = []
    for i, item in items:
        name = item.get("name")
        if not isinstance(name, str):
            continue
        if name in names:
            twice.append(Reference((section, i, "name"), f"{section[:-1]} name {name!r} is used twice",
                                   "names must be unique"))
        names.append(name)
    return names, twice


def _unknown(loc: Loc, what: str, name: str, options: list[str]) -> Reference:
    hint = did_you_mean(name, options) or f"{what}s: {', '.join(options) or 'none'}"
    return Reference(loc, f"unknown {what} {name!r}", hint)


def reference_problems(data: Any) -> list[Reference]:
    """Every broken name reference of a scenario's plain data (tolerant of any shape: fields are checked apart)."""
    if not isinstance(data, Mapping):
        return []
    tiers = _items(data.get("tiers"))
    tier_names, problems = _names("tiers", tiers)
    _, twice = _names("personas", _items(data.get("personas")))
    problems += twice
    raw_phases = data.get("phases")
    phases = _items(raw_phases)
    phase_names = [p["name"] for _, p in phases if isinstance(p.get("name"), str)]
    if raw_phases is None:
        phase_names = list(DEFAULT_PHASES)
    for i, persona in _items(data.get("personas")):
        tier = persona.get("tier")
        if isinstance(tier, str) and tier_names and tier not in tier_names:
            problems.append(_unknown(("personas", i, "tier"), "tier", tier, tier_names))
        by_type = persona.get("subagent_tiers")  # an agent trace's sub-agents, by their type
        for kind, name in by_type.items() if isinstance(by_type, Mapping) else ():
            if isinstance(name, str) and tier_names and name not in tier_names:
                problems.append(_unknown(("personas", i, "subagent_tiers", kind), "tier", name, tier_names))
    for i, tier in tiers:
        slo = tier.get("slo")
        named = slo.get("phases") if isinstance(slo, Mapping) else None
        for name in named if isinstance(named, Mapping) else ():
            loc: Loc = ("tiers", i, "slo", "phases", name)
            if name not in phase_names:
                problems.append(_unknown(loc, "phase", str(name), phase_names))
            elif phase_names.count(name) > 1:
                problems.append(Reference(loc, f"names phase {name!r}, which is not unique",
                                          "give the phases unique names"))
    limit = data.get("find_limit")
    ramped = limit.get("persona") if isinstance(limit, Mapping) else None
    persona_names = [p["name"] for _, p in _items(data.get("personas")) if isinstance(p.get("name"), str)]
    if isinstance(ramped, str) and persona_names and ramped not in persona_names:
        problems.append(_unknown(("find_limit", "persona"), "persona", ramped, persona_names))
    budget = data.get("budget")
    per_tier = budget.get("per_tier") if isinstance(budget, Mapping) else None
    for name in per_tier if isinstance(per_tier, Mapping) else ():
        if tier_names and name not in tier_names:
            problems.append(_unknown(("budget", "per_tier", name), "tier", str(name), tier_names))
    return problems
