"""``rushhour simulate``: one scenario in virtual time, written as a run folder the audit reads unchanged."""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import resource
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rushhour.loadgen.lifecycle import iso
from rushhour.loadgen.live import ShardTail
from rushhour.loadgen.prepare import (
    STOP_LIMIT_FOUND,
    Limit,
    RunOptions,
    apply_overrides,
    check_mapping,
    closed_personas,
)
from rushhour.loadgen.runkey import new_run_id
from rushhour.loadgen.schedule import phase_bounds
from rushhour.loadgen.ship import merge_budget_usage
from rushhour.loadgen.testbed_proc import testbed_config
from rushhour.loadgen.traces import localise_traces
from rushhour.records.manifest import RunManifest, write_manifest
from rushhour.records.record import RECORDS_DIR, Anchor, ShardWriter
from rushhour.scenarios import load_scenario
from rushhour.scenarios.loader import resolve_scenario_path, revalidate
from rushhour.scenarios.model import (
    MAX_LADDER,
    MAX_SCALE,
    MAX_SIM_REPLICAS,
    Route,
    Scenario,
)
from rushhour.scenarios.names import did_you_mean
from rushhour.sim import compiled
from rushhour.sim.cluster import Cluster, build_config
from rushhour.sim.driver import Env, SimRoute, sim_route
from rushhour.sim.loop import NS, Loop, VirtualClock
from rushhour.sim.personas import SimHost, run_persona
from rushhour.testbed.config import FaultSpec, TestbedConfig, from_dict
from rushhour.testbed.presets import get_preset, provenance

MODE = "simulated"


@dataclass
class SimOptions:
    """Overrides for one simulated run."""

    out_dir: Path = Path("runs")
    duration: str | None = None
    seed: int | None = None
    profile: str | None = None
    replicas: int | None = None  # the testbed's replica count (default: the scenario's)
    scale: float = 1.0  # the workload × this: chat and task arrival rates, swarm sizes, replay speed
    grow: dict[str, float] = field(default_factory=dict)  # persona name -> its own factor (before ``scale``)
    allow_paths: list[Path] = field(default_factory=list)
    preset: str | None = None  # the replicas' preset: a built-in name or a calibrated preset's .yaml (--preset)
    decode_jumps: bool = True  # False: every engine step is an event (the reference the jumps are tested against)
    find_limit: bool = False  # --find-limit: the scenario's `find_limit:`, else the defaults
    find_limit_persona: str | None = None  # --find-limit-persona: ramp this persona only
    # builds the find-limit controller (rushhour passes audit.limit.LimitController: sim may not import the audit)
    limit: Callable[[Scenario], Limit] | None = None


@dataclass
class SimResult:
    run_dir: Path
    exit_code: int
    stats: dict[str, Any]


def not_modelled(scenario: Scenario) -> list[str]:
    """What of the scenario the simulator leaves out (named in run.json and on the console)."""
    out = []
    if scenario.target.tokenizer:
        out.append("exact tokenizer counts (the byte estimate is used)")
    if scenario.abort is not None:
        out.append("early abort (the run goes to its end)")
    calls = scenario.target.testbed.config.get("tool_calls")
    if isinstance(calls, dict) and calls.get("probability"):
        out.append("tool-call answers (every answer is text)")
    return out


def parse_grow(items: list[str]) -> dict[str, float]:
    """``["swarm=5", "chat=2"]`` → {"swarm": 5.0, "chat": 2.0} (``--grow``; ValueError names the bad item)."""
    out: dict[str, float] = {}
    for item in items:
        name, eq, value = item.partition("=")
        try:
            factor = float(value)
        except ValueError:
            factor = float("nan")
        if not eq or not name.strip() or not 0 < factor <= MAX_SCALE:  # NaN and inf fail too
            raise ValueError(f"--grow {item!r}: use PERSONA=FACTOR with a factor in (0, {MAX_SCALE:g}], "
                             "e.g. --grow swarm=5")
        if name.strip() in out:
            raise ValueError(f"--grow {item!r}: persona {name.strip()!r} is grown twice")
        out[name.strip()] = factor
    return out


def scale_scenario(scenario: Scenario, factor: float, grow: Mapping[str, float] | None = None) -> Scenario:
    """The scenario with its workload multiplied by ``factor`` (rates, swarm sizes, replay speed), each persona
    named in ``grow`` by its own factor too ("the swarm grows 5×, chat doubles"), within the scenario's
    limits (``ScenarioError`` naming ``--scale``/``--grow``: a scaled rate must not flood the run either)."""
    grow = dict(grow or {})
    unknown = sorted(set(grow) - {p.name for p in scenario.personas})
    if unknown:
        names = [p.name for p in scenario.personas]
        near = did_you_mean(unknown[0], names)
        raise ValueError(f"--grow: no persona {', '.join(map(repr, unknown))} in the scenario"
                         + (f": {near}" if near else "") + f" (its personas: {', '.join(names)})")
    if factor == 1.0 and all(f == 1.0 for f in grow.values()):
        return scenario
    personas = [p.scaled(factor * grow.get(p.name, 1.0)) for p in scenario.personas]
    what = " ".join([f"--scale {factor:g}", *(f"--grow {n}={g:g}" for n, g in grow.items())])
    return revalidate(scenario.model_copy(update={"personas": personas}), what)


def prepare(name_or_path: str | Path, options: SimOptions) -> Scenario:
    """Load the scenario with the overrides applied; ``ScenarioError``/``FileNotFoundError`` for bad input."""
    run_options = RunOptions(profile=options.profile, duration=options.duration, seed=options.seed,
                             find_limit=options.find_limit, find_limit_persona=options.find_limit_persona)
    scenario = apply_overrides(load_scenario(name_or_path), run_options)
    check_mapping(scenario, str(name_or_path))
    scenario_dir = resolve_scenario_path(name_or_path).resolve().parent
    scenario = localise_traces(scenario, scenario_dir, options.allow_paths, str(name_or_path))
    return scale_scenario(with_preset(scenario, options.preset), options.scale, options.grow)


def with_preset(scenario: Scenario, preset: str | None) -> Scenario:
    """The scenario's testbed on ``preset`` (None: as it is); a preset file is read and checked now, so a bad one is
    one line before anything runs (ValueError)."""
    if preset is None:
        return scenario
    get_preset(preset)
    testbed = scenario.target.testbed.model_copy(update={"preset": preset})
    testbed = type(testbed).model_validate(testbed.model_dump())  # a file's path made absolute, as in a scenario
    target = scenario.target.model_copy(update={"testbed": testbed})
    return revalidate(scenario.model_copy(update={"target": target}), f"--preset {preset}")


def _versions() -> dict[str, str]:
    try:
        version = metadata.version("rushhour")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"python": platform.python_version(), "rushhour": version}


@contextlib.contextmanager
def young_collections_only() -> Iterator[None]:
    """The cyclic collector sweeps only the youngest generation while the loop runs (restored after).

    A large run holds millions of long-lived objects (block hashes, cached prefixes, contexts): every
    older-generation sweep walked them all (a fifth of the CPU of a 64-replica run). Almost nothing here
    is cyclic garbage: requests, attempts and tasks are freed by reference counting, and
    ``tests/sim/test_memory.py`` runs a scenario with the collector off and finds no cycle left to free
    (an exchange and its job were one until 3 Dec 2026: what outlived a young sweep stayed, ≈ 1.8 MB per
    simulated second). No finaliser writes a record (the records are the same with it off)."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], 1_000_000_000, 1_000_000_000)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def simulate_scenario(scenario: Scenario, source: str, options: SimOptions) -> SimResult:
    """Run a prepared scenario in virtual time; the run folder has records/ and run.json like a real run."""
    cfg, faults = build_config(scenario, options.replicas)
    run_id = new_run_id()
    run_dir = (Path(options.out_dir) / run_id).resolve()
    (run_dir / RECORDS_DIR).mkdir(parents=True)
    wall0 = time.time_ns()
    anchor = Anchor(mono_ns=0, wall_ns=wall0)  # record times are virtual ns from t = 0
    manifest = RunManifest(
        run_id=run_id, scenario_name=scenario.name, scenario_source=source,
        scenario=scenario.model_dump(mode="json"), seed=scenario.seed, target_url=scenario.target.url,
        profile=scenario.target.profile, model=scenario.target.model, dialect=scenario.target.dialect,
        duration_s=scenario.duration_s, drain_s=scenario.drain_s, mode=MODE, processes=1, versions=_versions(),
        command_line=list(sys.argv), hostname=socket.gethostname(), mono_anchor_ns=0, wall_anchor_ns=wall0,
        started_at=iso(wall0), schedule_starts_at=iso(wall0),
    )
    write_manifest(run_dir, manifest)
    clock = VirtualClock(0)
    loop = Loop(clock)
    cluster = Cluster(cfg, faults, loop, jumps=options.decode_jumps)
    writer = ShardWriter(run_dir / RECORDS_DIR / f"{socket.gethostname()}-{os.getpid()}-sim.jsonl",
                         run_id=run_id, anchor=anchor, flush_interval_s=1.0, flush_lines=4096)
    env = Env(scenario, loop, cluster, writer, run_id)
    fallbacks = [_fallback(scenario, fb, loop, options) for fb in scenario.resilience.fallback]
    env.routes += fallbacks
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    limit: Limit | None = None
    limit_tail = ShardTail(run_dir)
    with young_collections_only():
        try:
            env.event("worker_start", worker_index=0, workers=1, pid=os.getpid(), host=socket.gethostname(),
                      mode=MODE)
            cluster.start()
            for i, (start, _) in enumerate(phase_bounds(scenario.phases)):
                loop.at(int(start * NS), _phase_event, env, scenario.phases[i].name, i)
            for route in fallbacks:
                route.cluster.start()
            host = SimHost(env)
            limit = _limit(scenario, options, env)
            for persona in scenario.personas:
                loop.spawn(run_persona(host, persona))
            hard_stop = env.hard_stop_ns
            if limit is None:
                loop.run(env.end_ns)
            else:
                limit_tail.listeners.append(limit)
                stopped = _drive_limit(limit, loop, env, writer, limit_tail)
                if limit.done:  # the search ended the run: in-flight work is cut, as the real runner's SIGTERM does
                    hard_stop = stopped
            env.stopping = True  # arrivals end; in-flight work drains until the hard stop
            env.flush_shortfalls()
            loop.run(hard_stop)
            env.stop()
            usage = host.budget_usage()
            if usage is not None:  # this process's share and what it used, as a Locust process writes it
                env.event("budget_usage", **usage)
            env.event("worker_stop", reason=host.stop_reason or "completed")
        finally:
            writer.close()
    wall_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    simulated_s = scenario.duration_s + scenario.drain_s
    stats = {
        "engine": "testbed model (testbed/stack.py) on a discrete-event clock",
        "stack_profile": cfg.profile, "preset": cfg.preset, "replicas": cfg.replicas, "speed": cfg.speed,
        "scale": options.scale, "grow": dict(options.grow),
        "simulated_s": simulated_s, "wall_s": round(wall_s, 3), "cpu_s": round(cpu_s, 3),
        "speedup": round(simulated_s / wall_s, 1) if wall_s > 0 else None,
        "events": loop.events, "events_per_s": round(loop.events / wall_s) if wall_s > 0 else None,
        "steps": cluster.steps, "attempts": env.counters["attempts"], "tasks": env.counters["tasks"],
        "not_sent": env.counters["not_sent"],
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "not_modelled": not_modelled(scenario),
        "code": compiled.status(),  # the same records either way (tests/sim/test_compiled.py); not the same speed
    }
    calibrated = provenance(cfg.preset)
    if calibrated is not None:  # a calibrated preset's file: which one, fitted to what, how good (the audit shows it)
        stats["calibration"] = calibrated
    if not scenario.target.is_testbed:  # a real stack's URL: what ran is the testbed's imitation of its profile
        stats["imitates"] = (f"the target {scenario.target.url} was not contacted: its profile "
                             f"{scenario.target.profile!r} ran as the testbed's imitation ({cfg.profile}, "
                             f"{cfg.replicas} × {cfg.preset})")
    if fallbacks:  # each fallback route ran as a simulated stack of its own
        stats["fallback_routes"] = {
            r.name: {"profile": r.cluster.cfg.profile, "preset": r.cluster.cfg.preset,
                     "replicas": r.cluster.cfg.replicas, "steps": r.cluster.steps,
                     **({} if r.url == "testbed" else {"imitates": f"{r.url} was not contacted"})}
            for r in fallbacks}
    manifest.simulation = stats
    manifest.ended_at = iso(time.time_ns())
    manifest.stop_reason = host.stop_reason or "completed"
    if limit is not None:
        limit_tail.poll()  # the drain's records: every step judged again on all its requests, the late ones too
        manifest.extra["find_limit"] = limit.result()
        if limit.done and manifest.stop_reason == "completed":
            manifest.stop_reason = STOP_LIMIT_FOUND
    if usage is not None:
        manifest.budget_usage = merge_budget_usage(
            [{"name": "budget_usage", "detail": usage, "shard": writer.path.name}])
    manifest.shards = [writer.path.name]
    write_manifest(run_dir, manifest)
    return SimResult(run_dir, 0, stats)


LIMIT_LOOK_EVERY_NS = NS  # the controller is asked every virtual second, as the real runner asks it


def _limit(scenario: Scenario, options: SimOptions, env: Env) -> Limit | None:
    """The find-limit controller, its first level set, when the scenario has a `find_limit:` (else None)."""
    if scenario.find_limit is None:
        return None
    if options.limit is None:
        raise ValueError("this caller cannot run the find-limit controller: run it with `rushhour simulate "
                         "--find-limit`")
    closed = closed_personas(scenario)
    if closed:
        raise ValueError(f"find_limit: persona(s) {', '.join(closed)} have no open-loop arrival rate the controller "
                         "can scale (chat, or agent_swarm with start: arrivals); name one with find_limit.persona")
    limit = options.limit(scenario)
    env.live_scale = (limit.start(0.0), limit.persona)
    return limit


def _drive_limit(limit: Limit, loop: Loop, env: Env, writer: ShardWriter, tail: ShardTail) -> int:
    """Run the schedule a virtual second at a time, feeding the controller the records written so far and
    setting the load it asks for; the virtual time at which it ended (the search done, or the schedule's end)."""
    t = 0
    while t < env.end_ns and not limit.done:
        t = min(t + LIMIT_LOOK_EVERY_NS, env.end_ns)
        loop.run(t)
        writer.flush()
        tail.poll()
        changed = limit.look(t / NS)
        if changed is not None:
            env.live_scale = (changed, limit.persona)
            env.event("load_scale", scale=changed, persona=limit.persona)
    return t


def _fallback(scenario: Scenario, fb: Route, loop: Loop, options: SimOptions) -> SimRoute:
    """A fallback route as its own simulated stack: its ``testbed:`` options (``url: testbed``), or the
    testbed's imitation of its profile (a real URL is never contacted)."""
    cfg = from_dict(TestbedConfig, testbed_config(scenario, fb, with_faults=False)).validate()
    faults = [from_dict(FaultSpec, f, f"resilience.fallback.{fb.name}.testbed.faults[{i}]")
              for i, f in enumerate(fb.testbed.faults if fb.testbed else [])]
    cluster = Cluster(cfg, faults, loop, jumps=options.decode_jumps)
    return sim_route(scenario, fb.name, fb.url, fb.profile, fb.model or scenario.target.model,
                     fb.dialect or scenario.target.dialect, fb.credential, cluster)


def _phase_event(env: Env, name: str, index: int) -> None:
    env.event("phase", phase=name, index=index)


def simulate(name_or_path: str | Path, options: SimOptions) -> SimResult:
    """Load, override and simulate one scenario."""
    return simulate_scenario(prepare(name_or_path, options), str(name_or_path), options)


def replica_ladder(text: str) -> list[int]:
    """``"8..512"`` → 8, 16, …, 512 (doubling; HIGH itself last); ``"8,24,64"`` → those counts."""
    text = text.strip()
    try:
        if ".." in text:
            low_s, _, high_s = text.partition("..")
            low, high = int(low_s), int(high_s)
            if not 1 <= low <= high <= MAX_SIM_REPLICAS:
                raise ValueError
            out, r = [], low
            while r < high:
                out.append(r)
                r *= 2
            return [*out, high]
        values = sorted({int(v) for v in text.split(",") if v.strip()})
        if not values or values[0] < 1 or values[-1] > MAX_SIM_REPLICAS or len(values) > MAX_LADDER:
            raise ValueError
        return values
    except ValueError:
        raise ValueError(f"--replicas {text!r}: use LOW..HIGH (doubling, e.g. 8..512) or a list (8,16,64), "
                         f"at most {MAX_LADDER} counts from 1 to {MAX_SIM_REPLICAS:,}") from None
