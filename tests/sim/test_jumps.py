"""Decode jumps: a replica's run of decode-only steps applied at once gives the same records as step by step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rushhour.scenarios import load_scenario
from rushhour.sim.cluster import Cluster, build_config
from rushhour.sim.loop import Loop, VirtualClock
from rushhour.sim.run import SimOptions, simulate

# decode-heavy chat and a small agent swarm on two replicas: batches change at every arrival and finish,
# the client's 6-s total deadline cuts long answers mid-stream (a cancel inside a jump)
SCENARIO = """
name: sim-jumps
seed: 13
target:
  url: testbed
  profile: {profile}
  testbed: {{preset: h100-llama8b, replicas: 2}}
tiers:
  - {{name: interactive, priority: 100, slo: {{ttft_ms: {{p99: 2000}}}}}}
  - {{name: batch, priority: -1}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {{process: poisson, rate: 6}}
    max_concurrent_sessions: 1000
    output_tokens: {{dist: lognormal, median: 300, sigma: 0.6, max: 2000}}
  - kind: agent_swarm
    name: swarm
    tier: batch
    agents: 40
    shared_context_tokens: 1000
    task_context_tokens: {{dist: uniform, low: 200, high: 600}}
    output_tokens: {{dist: lognormal, median: 200, sigma: 0.5, max: 1000}}
resilience: {{timeouts: {{total_s: 6}}}}
phases:
  - {{name: steady, duration: 30s}}
calibration: {{probes: 0}}
drain_s: 2
"""
RANDOM_IDS = ("run_id", "request_id", "logical_id", "task_id", "session_id")


def _records(run_dir: Path) -> list[dict[str, object]]:
    rows = []
    for line in next((run_dir / "records").glob("*.jsonl")).read_text().splitlines()[1:]:
        d = json.loads(line)
        for k in RANDOM_IDS:
            d.pop(k, None)
        rows.append(d)
    return rows


@pytest.mark.parametrize("profile", ["llm-d", "vllm"])
def test_jumps_give_the_records_of_step_by_step(tmp_path: Path, profile: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(profile=profile))
    step = simulate(str(path), SimOptions(out_dir=tmp_path / "step", decode_jumps=False))
    jump = simulate(str(path), SimOptions(out_dir=tmp_path / "jump", decode_jumps=True))
    a, b = _records(step.run_dir), _records(jump.run_dir)
    requests = [r for r in a if r["kind"] == "request"]
    assert len(requests) > 200
    assert any(r.get("client_timeout") for r in requests)  # cancels land inside jumps too
    assert a == b
    # the same engine steps, far fewer events
    assert jump.stats["steps"] == step.stats["steps"]
    assert jump.stats["events"] < 0.7 * step.stats["events"]


def test_no_jumps_where_a_gated_cycle_still_acts(tmp_path: Path) -> None:
    """llm-d eviction acts in a gated dispatch cycle (and faults change steps): such stacks step one by one."""
    path = tmp_path / "s.yaml"
    for extra, jumps in (("", True), (", config: {enable_eviction: true}", False)):
        path.write_text(SCENARIO.format(profile="llm-d").replace("replicas: 2}", "replicas: 2" + extra + "}"))
        cfg, faults = build_config(load_scenario(str(path)))
        assert Cluster(cfg, faults, Loop(VirtualClock())).jumps is jumps


# the pool at llm-d's saturation ceiling with the batch band queued at the gateway: every admission or
# preemption that lowers the saturation opens the gate, and the pool's next step (a lazy one, as a rule)
# must dispatch. 16 replicas, so most of them are in a jump when it opens. The old rule (every jump cut
# when an admission opened the gate, none when a preemption did) dispatched a chat request 0.7 ms late
# at 105.68 s of this scenario: the preemption's step opened the gate, no step event followed
CEILING = """
name: sim-jumps-ceiling
seed: 7
target:
  url: testbed
  profile: llm-d
  testbed: {preset: h100-llama8b, replicas: 16}
tiers:
  - {name: interactive, priority: 100}
  - {name: batch, priority: -1}
personas:
  - {kind: chat, name: chat, tier: interactive, arrival: {process: poisson, rate: 5}, max_concurrent_sessions: 100000}
  - kind: agent_swarm
    name: swarm
    tier: batch
    agents: 2500
    ramp_s: 30
    idle_between_tasks_s: {dist: exponential, mean: 600}
phases:
  - {name: steady, duration: 120s}
calibration: {probes: 0}
drain_s: 0
"""


def test_jumps_at_the_saturation_ceiling_give_the_records_of_step_by_step(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(CEILING)
    step = simulate(str(path), SimOptions(out_dir=tmp_path / "step", decode_jumps=False))
    jump = simulate(str(path), SimOptions(out_dir=tmp_path / "jump", decode_jumps=True))
    a, b = _records(step.run_dir), _records(jump.run_dir)
    assert len([r for r in a if r["kind"] == "request"]) > 5000
    assert a == b
    assert jump.stats["steps"] == step.stats["steps"]
    assert jump.stats["events"] < 0.4 * step.stats["events"]


def test_a_long_jumps_step_times_in_array_passes_are_the_loops() -> None:
    """The step times of a long jump, computed in array passes, are the loop's to the nanosecond (the same float
    operations in the same order) over presets, slow factors and speeds."""
    import random

    from rushhour.sim.cluster import _jump_times_array, _jump_times_loop
    from rushhour.testbed.engine import EngineParams

    rng = random.Random(1)
    for trial in range(2000):
        p = EngineParams(256, 430_000, 8192, 16, rng.uniform(1e-3, 3e-2), rng.uniform(1e-6, 1e-4),
                         rng.uniform(1e-9, 1e-7), rng.uniform(1e-6, 3e-4))
        args = (rng.randrange(0, 10**12), rng.randrange(2, 400), rng.randrange(1, 257), rng.randrange(0, 430_000), p,
                rng.choice([1.0, 1.5, 3.0]), rng.choice([0.5, 1.0, 2.0, 20.0]))
        assert _jump_times_array(*args) == _jump_times_loop(*args), trial
