"""What the audit needs from the run's scenario (run.json ``scenario``) and an optional SLO file."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rushhour import stacks
from rushhour.audit import text
from rushhour.audit.errors import AuditError
from rushhour.audit.phases import measured_flags
from rushhour.records.manifest import RunManifest
from rushhour.scenarios.loader import ScenarioError, load_yaml, read_scenario_text
from rushhour.scenarios.model import SLO, Scenario


@dataclass
class TierInfo:
    """One tier: its name, priority (higher = more urgent) and SLO."""

    name: str
    priority: int = 0
    slo: SLO = field(default_factory=SLO)


@dataclass
class RunScenario:
    """The scenario facts the audit uses, tolerant of partial or older run.json files."""

    name: str = ""
    description: str = ""
    profile: str = "llm-d"
    target: str = ""
    model: str = ""
    seed: int = 0
    tiers: list[TierInfo] = field(default_factory=list)
    persona_kinds: dict[str, str] = field(default_factory=dict)
    persona_patience: dict[str, bool] = field(default_factory=dict)  # users give up (patience_s set)?
    route_profiles: dict[str, str] = field(default_factory=dict)
    phases: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float | None = None
    model_obj: Scenario | None = None

    def tier(self, name: str) -> TierInfo | None:
        return next((t for t in self.tiers if t.name == name), None)


def _phases(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out, start = [], 0.0
    for phase in raw:
        duration = float(phase.get("duration", 0.0) or 0.0)
        out.append({"name": phase.get("name", ""), "start_s": start, "end_s": start + duration,
                    "rate_scale": phase.get("rate_scale", 1.0), "measure": phase.get("measure")})
        start += duration
    for phase, measured in zip(out, measured_flags(out), strict=True):
        phase["measured"] = measured
    return out


def from_manifest(manifest: RunManifest) -> RunScenario:
    """Read the resolved scenario from run.json; fall back to its raw dict if it no longer validates."""
    raw = manifest.scenario
    if raw is None:
        return RunScenario(seed=manifest.seed or 0)
    try:
        model = Scenario.model_validate(raw)
    except ValidationError:
        model = None
    if model is not None:
        return RunScenario(
            name=model.name,
            description=model.description,
            profile=model.target.profile,
            target=model.target.url,
            model=model.target.model,
            seed=model.seed,
            tiers=[TierInfo(t.name, t.priority, t.slo) for t in model.tiers],
            persona_kinds={p.name: p.kind for p in model.personas},
            persona_patience={p.name: getattr(p, "patience_s", None) is not None for p in model.personas},
            route_profiles={r.name: r.profile for r in model.resilience.fallback},
            phases=_phases([p.model_dump() for p in model.phases]),
            duration_s=model.duration_s,
            model_obj=model,
        )
    # A scenario from another version: take what is recognisable, ignore the rest.
    target = raw.get("target") or {}
    tiers = []
    for tier in raw.get("tiers") or []:
        if isinstance(tier, dict) and "name" in tier:
            try:
                slo = SLO.model_validate(tier.get("slo") or {})
            except ValidationError:
                slo = SLO()
            tiers.append(TierInfo(str(tier["name"]), int(tier.get("priority", 0) or 0), slo))
    phases = [p for p in raw.get("phases") or [] if isinstance(p, dict)]
    return RunScenario(
        name=str(raw.get("name", "")),
        description=str(raw.get("description", "")),
        profile=str(target.get("profile", "llm-d")),
        target=str(target.get("url", "")),
        model=str(target.get("model", "")),
        seed=int(raw.get("seed", 0) or 0),
        tiers=tiers,
        persona_kinds={str(p.get("name")): str(p.get("kind")) for p in raw.get("personas") or []
                       if isinstance(p, dict)},
        persona_patience={str(p.get("name")): p.get("patience_s") is not None for p in raw.get("personas") or []
                          if isinstance(p, dict)},
        phases=_phases(phases),
    )


def testbed_label(scenario: Scenario | None) -> str | None:
    """What the embedded testbed of a run was ("llm-d · tiny × 1"), None when the run did not target one.

    Two testbed runs differ in their ephemeral ports, never in that; what tells them apart is this.
    """
    if scenario is None or not scenario.target.is_testbed:
        return None
    options = scenario.target.testbed
    label = f"{stacks.testbed_profile(scenario.target.profile)} · {options.preset} × {options.replicas}"
    if options.speed != 1.0:
        label += f" at speed {text.plain(options.speed)}"
    if options.config:  # config overrides change the stack: a short digest tells two configs apart
        config = json.dumps(options.config, sort_keys=True, default=str)
        label += f" · config {hashlib.sha256(config.encode()).hexdigest()[:8]}"
    return label


def load_slo_file(path: Path) -> dict[str, SLO]:
    """``--slo FILE``: YAML ``{tiers: {name: SLO}}``; errors name the file and the tier."""
    try:
        # the scenario loader's limits: an alias bomb or deep nesting is refused before it expands
        data = load_yaml(read_scenario_text(Path(path)), str(path))
    except ScenarioError as exc:
        raise AuditError(f"cannot read SLO file {path}: {exc.problems[0].render(str(path))}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tiers"), dict):
        raise AuditError(f"SLO file {path}: expected a mapping 'tiers: {{<tier>: <slo>}}'")
    out: dict[str, SLO] = {}
    for name, body in data["tiers"].items():
        try:
            out[str(name)] = SLO.model_validate(body or {})
        except ValidationError as exc:
            raise AuditError(f"SLO file {path}: tier {name!r}: {exc}") from None
    return out


def latency_bounds(slo: SLO) -> dict[str, float]:
    """Per-request ceilings for goodput: the loosest percentile each latency SLO names.

    A request beyond the p99 (or max) ceiling is out of SLO whatever the distribution; when only a
    p50 is set, that is the only per-request line the user drew.
    """
    bounds: dict[str, float] = {}
    for metric in ("ttft_ms", "ttft_from_intended_ms", "tpot_ms", "e2e_ms"):
        spec = getattr(slo, metric)
        if spec is None:
            continue
        for key in ("max", "p99", "p95", "p90", "p50"):
            value = getattr(spec, key)
            if value is not None:
                bounds[metric] = float(value)
                break
    return bounds
