"""Load ladders: a sweep of load levels (and replica counts) and the multi-tier study grid, as scenarios.

This module only plans and drives runs: it writes one scenario file per step under
``runs/sweep-<id>/step-XX/`` and calls a ``run_step`` function for each (the command line passes one
that runs the scenario with ``loadgen.runner`` and audits it). Analysis lives in ``audit.knee``.
Stdlib, pyyaml and ``scenarios`` only: no numpy, no locust.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from rushhour.scenarios.kinds import of_kind
from rushhour.scenarios.loader import validate_data
from rushhour.scenarios.model import MAX_LADDER, MAX_SCALE, ChatPersona, Phase, Scenario, Tier

Mode = Literal["steady", "scale"]


class SweepError(ValueError):
    """A sweep that cannot be planned (bad range, replicas against a non-testbed target, …)."""


# --------------------------------------------------------------------------- parsing


def parse_scales(text: str, steps: int = 8) -> list[float]:
    """``"0.25..3"`` with ``steps`` → evenly spaced scales; ``"0.5,1,2"`` → those scales."""
    text = text.strip()
    if ".." in text:
        low_s, _, high_s = text.partition("..")
        try:
            low, high = float(low_s), float(high_s)
        except ValueError:
            raise SweepError(f"--scale {text!r}: use LOW..HIGH (e.g. 0.25..3) or a list (0.5,1,2)") from None
        if not (0 < low < high <= MAX_SCALE) or not 2 <= steps <= MAX_LADDER:
            raise SweepError(f"--scale {text!r} with --steps {steps}: need 0 < LOW < HIGH <= {MAX_SCALE:g} and "
                             f"2 to {MAX_LADDER} steps")
        return [round(low + (high - low) * i / (steps - 1), 4) for i in range(steps)]
    try:
        values = sorted({float(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise SweepError(f"--scale {text!r}: use LOW..HIGH (e.g. 0.25..3) or a list (0.5,1,2)") from None
    if not values or not all(0 < v <= MAX_SCALE for v in values) or len(values) > MAX_LADDER:  # NaN fails too
        raise SweepError(f"--scale {text!r}: at most {MAX_LADDER} scales, each a number in (0, {MAX_SCALE:g}]")
    return values


def parse_replicas(text: str | None) -> list[int | None]:
    """``"1,2,4"`` → [1, 2, 4]; None → [None] (keep the scenario's replicas)."""
    if not text:
        return [None]
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise SweepError(f"--replicas {text!r}: use a list of counts, e.g. 1,2,4") from None
    if not values or values[0] < 1 or len(values) > MAX_LADDER:
        raise SweepError(f"--replicas {text!r}: at most {MAX_LADDER} counts, each at least 1")
    return list(values)


# --------------------------------------------------------------------------- scenario transforms


def peak_phase(scenario: Scenario) -> Phase:
    """The phase with the highest rate scale: 'today's peak' (scale 1 of a sweep)."""
    return max(scenario.phases, key=lambda p: (p.rate_scale, p.agents_scale or p.rate_scale))


def scaled_scenario(scenario: Scenario, scale: float, *, mode: Mode = "steady", step_duration_s: float = 30.0,
                    warmup_s: float = 10.0, replicas: int | None = None, seed: int | None = None,
                    drain_s: float | None = None, cooldown_s: float = 0.0) -> Scenario:
    """The scenario at ``scale`` × today's peak: one steady phase (after an optional warm-up, before an optional
    cool-down), or every phase's ``rate_scale`` and ``agents_scale`` multiplied (``mode='scale'``).

    A cool-down keeps the load on, unjudged, after the steady phase: without it the steady phase's last requests
    are answered after the arrivals stop, with no queue behind them, and read the stack as stronger than it is
    under sustained load (docs/find-limit.md measures it)."""
    data = scenario.model_dump(mode="json", by_alias=True)
    if mode == "steady":
        peak = peak_phase(scenario)
        rate = peak.rate_scale * scale
        agents = (peak.agents_scale if peak.agents_scale is not None else peak.rate_scale) * scale
        phases = []
        if warmup_s > 0:
            phases.append({"name": "warm-up", "duration": warmup_s, "rate_scale": rate, "agents_scale": agents})
        phases.append({"name": f"steady-{scale:g}x", "duration": step_duration_s, "rate_scale": rate,
                       "agents_scale": agents})
        if cooldown_s > 0:
            phases.append({"name": "cool-down", "duration": cooldown_s, "rate_scale": rate, "agents_scale": agents})
        data["phases"] = phases
        _phase_slos_onto(data, {peak.name: str(phases[-1]["name"])})
    else:
        for phase in data["phases"]:
            agents = phase.get("agents_scale")
            phase["agents_scale"] = (agents if agents is not None else phase["rate_scale"]) * scale
            phase["rate_scale"] = phase["rate_scale"] * scale
    if replicas is not None:
        if not scenario.target.is_testbed:
            raise SweepError("--replicas needs the embedded testbed as target (url: testbed)")
        data["target"]["testbed"]["replicas"] = replicas
    if seed is not None:
        data["seed"] = seed
    if drain_s is not None:
        data["drain_s"] = drain_s
    data["description"] = (f"{scenario.description} [sweep step: {scale:g}× peak"
                           f"{f', {replicas} replicas' if replicas else ''}]").strip()
    return validate_data(data, f"--scale {scale:g}" + (f" --replicas {replicas}" if replicas else ""))


def _phase_slos_onto(data: dict[str, Any], renames: dict[str, str]) -> None:
    """A step replaces the phases: per-phase SLOs follow their phase (the peak → the steady phase), the rest go."""
    for tier in data.get("tiers") or []:
        slo = tier.get("slo") or {}
        if slo.get("phases"):
            slo["phases"] = {renames[name]: body for name, body in slo["phases"].items() if name in renames}


def write_scenario(scenario: Scenario, path: Path) -> Path:
    """Write a scenario as YAML that ``load_scenario`` reads back identically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(scenario.model_dump(mode="json", by_alias=True), sort_keys=False))
    return path


# --------------------------------------------------------------------------- plans


@dataclass
class PlannedStep:
    """One run of a ladder: its folder, its scenario file and its coordinates."""

    index: int
    scale: float
    replicas: int | None
    dir: Path
    scenario_path: Path
    duration_s: float  # phase time (what offered load is divided by)
    meta: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None
    error: str | None = None


@dataclass
class Plan:
    """A sweep or study: its folder and its steps, in the order they run."""

    id: str
    root: Path
    scenario: str
    steps: list[PlannedStep]
    meta: dict[str, Any] = field(default_factory=dict)


def new_id(prefix: str) -> str:
    """``<prefix>-YYYYmmdd-HHMMSS-xxxx``."""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def plan_sweep(scenario: Scenario, scales: Sequence[float], *, out_dir: Path = Path("runs"),
               replicas: Sequence[int | None] = (None,), mode: Mode = "steady", step_duration_s: float = 30.0,
               warmup_s: float = 10.0, seed: int | None = None, drain_s: float | None = 3.0,
               sweep_id: str | None = None, cooldown_s: float = 0.0) -> Plan:
    """Write one scenario per (replicas, scale) under ``out_dir/sweep-<id>/step-XX/``."""
    sweep_id = sweep_id or new_id("sweep")
    root = Path(out_dir) / sweep_id
    steps: list[PlannedStep] = []
    for r in replicas:
        for scale in sorted(scales):
            steps.append(plan_step(scenario, scale, len(steps), root, mode=mode, step_duration_s=step_duration_s,
                                   warmup_s=warmup_s, replicas=r, seed=seed, drain_s=drain_s,
                                   cooldown_s=cooldown_s))
    meta = {"mode": mode, "step_duration_s": step_duration_s if mode == "steady" else None,
            "warmup_s": warmup_s if mode == "steady" else None,
            "cooldown_s": cooldown_s if mode == "steady" else None, "scales": list(scales),
            "replicas": list(replicas)}
    return Plan(sweep_id, root, scenario.name, steps, meta)


def plan_step(scenario: Scenario, scale: float, index: int, root: Path, *, mode: Mode = "steady",
              step_duration_s: float = 30.0, warmup_s: float = 10.0, replicas: int | None = None,
              seed: int | None = None, drain_s: float | None = 3.0, cooldown_s: float = 0.0) -> PlannedStep:
    """One step's scenario at ``scale``, written under ``root/step-XX/`` (a search plans its probes one by one)."""
    sc = scaled_scenario(scenario, scale, mode=mode, step_duration_s=step_duration_s, warmup_s=warmup_s,
                         replicas=replicas, seed=seed, drain_s=drain_s, cooldown_s=cooldown_s)
    folder = Path(root) / f"step-{index:02d}"
    return PlannedStep(index, scale, replicas, folder, write_scenario(sc, folder / "scenario.yaml"), sc.duration_s)


RunStep = Callable[[PlannedStep], Path | None]


def run_plan(plan: Plan, run_step: RunStep, on_done: Callable[[PlannedStep], None] | None = None) -> Plan:
    """Run every step in order; a failing step is recorded (``error``) and the ladder goes on."""
    for step in plan.steps:
        try:
            step.run_dir = run_step(step)
        except Exception as exc:  # one broken step must not lose the others
            step.error = f"{type(exc).__name__}: {exc}"
        if on_done is not None:
            on_done(step)
    return plan


# --------------------------------------------------------------------------- the multi-tier study


@dataclass(frozen=True)
class StudyGrid:
    """Tier counts × high-priority mixes × load levels × policies."""

    k: tuple[int, ...] = (1, 2, 4, 6, 10)
    mixes: tuple[str, ...] = ("uniform",)
    loads: tuple[str, ...] = ("moderate", "saturated")
    policies: tuple[str, ...] = ("fifo", "llm-d", "headroom")
    duration_s: float = 12.0
    warmup_s: float = 0.0

    @property
    def size(self) -> int:
        """Runs in the grid (K = 1: one mix and one policy, since one tier is FIFO under any policy)."""
        return sum(len(self.loads) * len(self.policies_for(k)) * (1 if k == 1 else len(self.mixes)) for k in self.k)

    def policies_for(self, k: int) -> tuple[str, ...]:
        """With one tier every policy is FIFO: run the baseline only."""
        if k == 1 and "fifo" in self.policies:
            return ("fifo",)
        return self.policies

    def as_dict(self) -> dict[str, list[Any]]:
        return {"k": list(self.k), "mixes": list(self.mixes), "loads": list(self.loads),
                "policies": list(self.policies), "duration_s": [self.duration_s]}


DEFAULT_GRID = StudyGrid()
QUICK_GRID = StudyGrid(k=(1, 4), mixes=("uniform",), loads=("moderate",), policies=("fifo", "headroom"), duration_s=6.0)
FULL_GRID = StudyGrid(k=(1, 2, 3, 4, 5, 6, 8, 10), mixes=("rare", "uniform", "common"),
                      loads=("moderate", "saturated"), policies=("fifo", "llm-d", "headroom"), duration_s=20.0)
GRIDS = {"default": DEFAULT_GRID, "quick": QUICK_GRID, "full": FULL_GRID}
# load level -> multiplier of the study scenario's arrival rate (its rate is 'moderate')
LOAD_LEVELS = {"moderate": 1.0, "saturated": 1.5}


def tier_mix(k: int, mix: str) -> list[float]:
    """Share of traffic per tier, tier 0 (most urgent) first.

    ``rare``: high tiers are rare, each tier twice the one above (3 tiers ≈ the enterprise mix
    [0.14, 0.29, 0.57] vs the study's [0.10, 0.30, 0.60]); ``common``: the reverse; ``uniform``: equal.
    """
    if k < 1:
        raise SweepError("K must be at least 1")
    if mix == "uniform":
        weights = [1.0] * k
    elif mix == "rare":
        weights = [2.0**p for p in range(k)]
    elif mix == "common":
        weights = [2.0 ** (k - 1 - p) for p in range(k)]
    else:
        raise SweepError(f"unknown mix {mix!r} (rare, uniform, common)")
    total = sum(weights)
    return [w / total for w in weights]


def study_scenario(base: Scenario, k: int, mix: str, load: str, policy: str, *, duration_s: float,
                   warmup_s: float = 0.0, seed: int | None = None) -> Scenario:
    """K tiers t0…t(K-1) (t0 most urgent) sharing the base's chat persona by ``mix``, under ``policy``."""
    chats = of_kind(base.personas, ChatPersona)
    template = chats[0] if chats else None
    if template is None:
        raise SweepError("the study scenario needs a chat persona to split across tiers")
    slo_tier = base.tiers[0]
    rate = sum(p.arrival.rate for p in chats) * LOAD_LEVELS[load]
    tiers: list[dict[str, Any]] = []
    personas: list[dict[str, Any]] = []
    for p, share in enumerate(tier_mix(k, mix)):
        tier = Tier(name=f"t{p}", priority=10 * (k - 1 - p), tenants=slo_tier.tenants, slo=slo_tier.slo)
        tiers.append(tier.model_dump(mode="json", by_alias=True))
        persona = template.model_dump(mode="json", by_alias=True)
        persona.update(name=f"chat-t{p}", tier=f"t{p}")
        persona["arrival"]["rate"] = max(rate * share, 1e-3)
        personas.append(persona)
    data = base.model_dump(mode="json", by_alias=True)
    data.update(tiers=tiers, personas=personas, name=f"{base.name}-k{k}-{mix}-{load}-{policy}")
    data["target"]["profile"] = policy
    phases = [{"name": "warm-up", "duration": warmup_s}] if warmup_s > 0 else []
    data["phases"] = [*phases, {"name": load, "duration": duration_s, "rate_scale": 1.0}]
    _phase_slos_onto(data, {})
    if seed is not None:
        data["seed"] = seed
    data["description"] = f"multi-tier study cell: K={k}, {mix} mix, {load} load, {policy}"
    return validate_data(data, f"study cell K={k} {mix} {load} {policy}")


def plan_study(base: Scenario, grid: StudyGrid, *, out_dir: Path = Path("runs"), seed: int | None = None,
               study_id: str | None = None) -> Plan:
    """One scenario per grid cell under ``out_dir/study-<id>/step-XX/``; same seed for every cell."""
    study_id = study_id or new_id("study")
    root = Path(out_dir) / study_id
    steps: list[PlannedStep] = []
    for load in grid.loads:
        for k in grid.k:
            for mix in grid.mixes[:1] if k == 1 else grid.mixes:
                for policy in grid.policies_for(k):
                    index = len(steps)
                    sc = study_scenario(base, k, mix, load, policy, duration_s=grid.duration_s,
                                        warmup_s=grid.warmup_s, seed=seed)
                    folder = root / f"step-{index:02d}"
                    steps.append(PlannedStep(index, LOAD_LEVELS[load], sc.target.testbed.replicas, folder,
                                             write_scenario(sc, folder / "scenario.yaml"), sc.duration_s,
                                             meta={"k": k, "mix": mix, "load": load, "policy": policy}))
    return Plan(study_id, root, base.name, steps, {"grid": grid.as_dict(), "size": grid.size})


def estimate_s(plan: Plan, overhead_s: float = 6.0) -> float:
    """Rough wall time of a plan: phase time plus a per-run start/drain/audit overhead."""
    return sum(s.duration_s + overhead_s for s in plan.steps)


def fmt_duration(seconds: float) -> str:
    """``95`` → ``1 min 35 s``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{math.floor(seconds / 60)} min {seconds % 60:.0f} s"


_CELL_NAME = re.compile(r"-k(\d+)-([a-z]+)-([a-z]+)-(.+)$")


def existing_study(root: Path) -> Plan:
    """A finished study folder as a plan (steps with their run folders), to re-analyse without running."""
    from rushhour.scenarios import load_scenario

    root = Path(root)
    steps: list[PlannedStep] = []
    for folder in sorted(root.glob("step-*")):
        path = folder / "scenario.yaml"
        if not path.exists():
            continue
        sc = load_scenario(path)
        match = _CELL_NAME.search(sc.name)
        if not match:
            raise SweepError(f"{path}: not a study cell (name {sc.name!r})")
        runs = sorted(p for p in folder.iterdir() if (p / "run.json").exists())
        step = PlannedStep(int(folder.name.split("-")[1]), LOAD_LEVELS.get(match.group(3), 1.0),
                           sc.target.testbed.replicas, folder, path, sc.duration_s,
                           meta={"k": int(match.group(1)), "mix": match.group(2), "load": match.group(3),
                                 "policy": match.group(4)})
        step.run_dir = runs[-1] if runs else None
        step.error = None if runs else "no run folder"
        steps.append(step)
    if not steps:
        raise SweepError(f"{root}: no study steps found")
    return Plan(root.name, root, "multitier-study", steps, {})
