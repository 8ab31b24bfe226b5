"""``plan --from-planner``: an llm-d-planner recommendation as two scenarios — its own profile and a tiered mix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from rushhour.audit import text
from rushhour.scenarios.model import Scenario
from rushhour.scenarios.planner import Recommendation, mix_scenario, profile_scenario, read_recommendation
from rushhour.sim.run import SimOptions, prepare


@dataclass(frozen=True)
class Imported:
    """The recommendation and the two prepared scenarios the plan runs (their files kept in the plan's folder)."""

    rec: Recommendation
    profile: Scenario
    profile_source: str
    mix: Scenario
    mix_source: str
    mix_text: str
    notes: list[str]


def _write(doc: dict[str, object], path: Path) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return path


def import_plan(path: Path, scenario: str | None, root: Path, *, duration: str, seed: int | None,
                grow: dict[str, float], peak: float, batch_agents: int | None) -> Imported:
    """Read the planner's file, write its profile and mix as scenario files under ``root``, and prepare both.

    ``scenario`` (a file or built-in name), when given, is the mix instead of the derived one: its tiers,
    personas and phases, on the planner's preset and replica count. Raises ``PlannerError``/``ScenarioError``.
    """
    rec = read_recommendation(Path(path))
    root.mkdir(parents=True, exist_ok=True)
    options = SimOptions(duration=duration, seed=seed)
    profile_path = _write(profile_scenario(rec, seed=seed or 1), root / "planner-profile.yaml")
    profile = prepare(profile_path, options)
    agents = rec.replicas * 10 if batch_agents is None else batch_agents
    if scenario is None:
        mix_path = _write(mix_scenario(rec, seed=seed or 1, peak=peak, batch_agents=agents), root / "planner-mix.yaml")
        mix = prepare(mix_path, SimOptions(duration=duration, seed=seed, grow=grow))
        mix_source = str(mix_path)
        swarm = f", a batch swarm of {agents} agents at low priority" if agents else ""
        mix_text = f"chat at high priority with a {text.plain(peak)}× peak over half the run{swarm}"
    else:
        mix = prepare(scenario, SimOptions(duration=duration, seed=seed, grow=grow))
        testbed = mix.target.testbed.model_copy(update={"preset": rec.preset, "replicas": rec.replicas})
        mix = mix.model_copy(update={"target": mix.target.model_copy(update={"testbed": testbed})})
        mix_source = scenario
        mix_text = f"scenario {mix.name}: its own tiers, traffic and SLOs, on the planner's preset"
    notes = [f"{rec.model} on {rec.gpu} (TP {rec.tensor_parallel}) simulated as preset {rec.preset}; "
             "docs/capacity.md says how far that preset was checked against published measurements",
             f"the planner's ITL {rec.percentile} target is judged as tpot_ms.{rec.percentile} (each request's "
             "time per output token after the first)",
             "the planner's expected_qps is already its estimate of the peak; the mix's peak multiplies it again"]
    if rec.e2e_ms is not None:
        notes.append(f"the planner's E2E {rec.percentile} target ({text.ms(rec.e2e_ms)}) is not judged: rushhour "
                     "has no end-to-end latency check")
    return Imported(rec=rec, profile=profile, profile_source=str(profile_path), mix=mix, mix_source=mix_source,
                    mix_text=mix_text, notes=notes)
