"""What the shared persona code (``loadgen/flow``) brings to virtual time: budgets, control twins, sub-agents,
conversation datasets — each simulated with the Locust personas' own code and written as a real run writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim_helpers import SATURATED

from rushhour.audit import run_audit
from rushhour.loadgen.datasets import read_dataset
from rushhour.scenarios.distributions import BUNDLED_DATASETS
from rushhour.sim.run import SimOptions, simulate


def _run(tmp_path: Path, text: str, **options: Any) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    result = simulate(str(scenario), SimOptions(out_dir=tmp_path, **options))
    lines = [json.loads(x) for x in next((result.run_dir / "records").glob("*.jsonl")).read_text().splitlines()[1:]]
    return result.run_dir, lines, json.loads((result.run_dir / "run.json").read_text())


def test_budget_refuses_before_sending_and_stops_the_run(tmp_path: Path) -> None:
    _, lines, manifest = _run(tmp_path, SATURATED + "budget: {max_requests: 20}\n", duration="10s")
    assert manifest["simulation"]["not_modelled"] == []
    sent = [d for d in lines if d["kind"] == "request" and not d["not_sent"]]
    refused = [d for d in lines if d["kind"] == "request" and d["reason"] == "budget"]
    assert len(sent) == 20 and refused and all(d["not_sent"] and d["status"] == 0 for d in refused)
    events = [d for d in lines if d["kind"] == "event"]
    assert [e["detail"]["scope"] for e in events if e["name"] == "budget_reached"] == ["run"]
    assert events[-1]["name"] == "worker_stop" and events[-1]["detail"]["reason"] == "budget"
    assert manifest["stop_reason"] == "budget" and manifest["budget_usage"]["run"]["requests"] == 20


def test_control_twins_run_at_the_neutral_priority(tmp_path: Path) -> None:
    run_dir, lines, manifest = _run(tmp_path, SATURATED + "control: {share: 0.5}\n", duration="20s")
    assert manifest["simulation"]["not_modelled"] == []
    reqs = [d for d in lines if d["kind"] == "request" and not d["not_sent"]]
    twins = [d for d in reqs if d["control"]]
    originals = {d["logical_id"] for d in reqs if not d["control"]}
    assert twins and all(d["twin_of"] in originals for d in twins)
    summary = run_audit(run_dir)
    assert any(t.priority_effect is not None for t in summary.tiers)


SUBAGENTS = """
name: sim-subagents
seed: 9
target:
  url: testbed
  profile: vllm
  testbed: {preset: tiny, replicas: 1, speed: 10}
tiers:
  - {name: batch, priority: 1}
personas:
  - kind: agent_swarm
    name: lead
    tier: batch
    agents: 2
    ramp_s: 0
    steps: 2
    fanout: 1
    tool_time_s: 0.05
    shared_context_tokens: 64
    task_context_tokens: 32
    append_tokens: 24
    output_tokens: 5
    tools: true
    deadline_s: 60
    subagents: {probability: 1.0, fan_out: 3, steps: 2, prefix_tokens: 96}
phases:
  - {name: main, duration: 2s}
drain_s: 8
"""


def test_subagents_spawn_under_their_task(tmp_path: Path) -> None:
    _, lines, manifest = _run(tmp_path, SUBAGENTS)
    assert manifest["simulation"]["not_modelled"] == []
    reqs = [d for d in lines if d["kind"] == "request"]
    spawned = [d for d in reqs if d["parent_id"]]
    parents = {d["logical_id"]: d for d in reqs if not d["parent_id"]}
    assert spawned and all(d["parent_id"] in parents for d in spawned)
    # each spawn: three sub-agents of two steps, with the parent's task id
    for parent_id in {d["parent_id"] for d in spawned}:
        mine = [d for d in spawned if d["parent_id"] == parent_id]
        assert {d["task_id"] for d in mine} == {parents[parent_id]["task_id"]}
        assert {(d["fanout_index"], d["step"]) for d in mine} <= {(j, s) for j in range(3) for s in (1, 2)}
    assert all(d["tools_offered"] for d in reqs)
    tasks = [d for d in lines if d["kind"] == "task"]
    assert tasks and all(t["calls"] >= 7 for t in tasks if t["outcome"] == "completed")


DATASET = """
name: sim-dataset
seed: 3
target:
  url: testbed
  profile: vllm
  testbed: {preset: tiny, replicas: 1, speed: 10}
tiers:
  - {name: interactive, priority: 0}
personas:
  - kind: chat
    name: users
    tier: interactive
    arrival: {process: poisson, rate: 6}
    think_time_s: 0.05
    system_prompt_tokens: 48
    dataset: {path: chat-mini.jsonl}
phases:
  - {name: main, duration: 3s}
drain_s: 6
"""


def test_dataset_sessions_replay_their_conversations(tmp_path: Path) -> None:
    _, lines, manifest = _run(tmp_path, DATASET)
    assert manifest["simulation"]["not_modelled"] == []
    turns = {len(d.turns) for d in read_dataset(BUNDLED_DATASETS / "chat-mini.jsonl")}
    tasks = [d for d in lines if d["kind"] == "task" and d["outcome"] == "completed"]
    assert tasks and all(t["steps"] in turns for t in tasks)
    # a session's later turn carries its earlier ones: the prompt grows turn by turn
    reqs = sorted((d for d in lines if d["kind"] == "request"), key=lambda d: (d["session_id"], d["step"]))
    by_session: dict[str, list[int]] = {}
    for d in reqs:
        by_session.setdefault(d["session_id"], []).append(d["prompt_tokens_intended"])
    assert any(len(v) > 1 for v in by_session.values())
    assert all(v == sorted(v) for v in by_session.values())


def test_a_fallback_to_a_real_url_runs_as_the_imitation_and_says_so(tmp_path: Path) -> None:
    text = SATURATED + ('resilience: {retries: {on: ["429"], max_attempts: 1}, '
                        'fallback: [{name: spare, url: "http://127.0.0.1:9", profile: vllm}]}\n')
    _, lines, manifest = _run(tmp_path, text, duration="10s")
    spare = manifest["simulation"]["fallback_routes"]["spare"]
    assert spare["imitates"] == "http://127.0.0.1:9 was not contacted" and spare["steps"] > 0
    moved = [d for d in lines if d["kind"] == "request" and d["route"] == "spare"]
    assert moved and all(d["endpoint"] == "http://127.0.0.1:9" and d["attempt"] == 2 for d in moved)
