"""Agents against a testbed that calls tools: each next step carries the actual call and a tool result,
and every step's prompt starts with the previous step's prompt byte for byte (what the testbed received)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rushhour.audit import run_audit
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.record import read_shard, shard_paths
from rushhour.reports import sentences

pytestmark = pytest.mark.e2e

SCENARIO = """
name: e2e-tool-calls
seed: 5
target:
  url: testbed
  profile: vllm
  dialect: {dialect}
  testbed:
    preset: tiny
    replicas: 1
    speed: 10
    config: {{tool_calls: {{probability: 1.0}}, request_log: "{log}"}}
  metrics: null
tiers:
  - {{name: batch, priority: 1}}
personas:
  - kind: agent_swarm
    name: tooled
    tier: batch
    agents: 2
    ramp_s: 0
    steps: 3
    fanout: {{dist: uniform, low: 1, high: 2}}
    tool_time_s: 0.05
    shared_context_tokens: 64
    task_context_tokens: 32
    append_tokens: 40
    output_tokens: 6
    tools: true
    deadline_s: 30
  - kind: agent_swarm
    name: plain
    tier: batch
    agents: 1
    ramp_s: 0
    steps: 2
    fanout: 1
    tool_time_s: 0.05
    shared_context_tokens: 64
    task_context_tokens: 32
    append_tokens: 40
    output_tokens: 6
    deadline_s: 30
phases:
  - {{name: main, duration: 3s}}
drain_s: 5
"""


def _run(tmp_path: Path, dialect: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, Any]]:
    log = tmp_path / "requests.jsonl"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(log=log, dialect=dialect))
    result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs", processes=1))
    assert result.exit_code == 0 and result.run_dir is not None
    records = [r for p in shard_paths(result.run_dir) for r in read_shard(p).lines
               if r["kind"] == "request" and not r["not_sent"] and r["persona"] in ("tooled", "plain")]
    ledger = {row["request_id"]: row for row in (json.loads(x) for x in
              (result.run_dir / "testbed-ledger.jsonl").read_text().splitlines())}
    bodies = {row["request_id"]: row["body"] for row in (json.loads(x) for x in log.read_text().splitlines())}
    return records, ledger, bodies


def _dump(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=False, separators=(",", ":"))


def _steps(records: list[dict[str, Any]], persona: str) -> dict[str, dict[int, list[dict[str, Any]]]]:
    tasks: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["persona"] == persona:
            tasks[r["task_id"]][r["step"]].append(r)
    return tasks


def test_openai_chat_steps_carry_the_call_and_keep_the_prefix(tmp_path: Path) -> None:
    records, ledger, bodies = _run(tmp_path, "openai-chat")
    assert set(r["request_id"] for r in records) <= set(ledger)  # the ledger accounts every request
    tooled = [r for r in records if r["persona"] == "tooled"]
    served = [r for r in tooled if ledger[r["request_id"]]["outcome"] == "served"]
    assert served and all(r["tool_call"] in {"read_file", "search_code", "edit_file", "run_command"} for r in served)
    # the record says which requests offered tools
    assert all(r["tools_offered"] for r in tooled) and not any(r["tools_offered"] for r in records if r not in tooled)
    carried = 0
    for steps in _steps(records, "tooled").values():
        for k in sorted(steps):
            if k + 1 not in steps:
                continue
            after = steps[k + 1][0]
            later = bodies[after["request_id"]]["messages"]
            # the branch the agent continued from: the one whose call the next step answers
            answered = ledger[after["request_id"]]["tool_results"]
            assert answered, "a step after a tool call carries no tool result"
            branch = next(r for r in steps[k] if ledger[r["request_id"]]["tool_call"] == answered[-1])
            before = bodies[branch["request_id"]]["messages"]
            # byte-identical history: every message of the earlier prompt, in order, then the call and its result
            assert [_dump(m) for m in later[: len(before)]] == [_dump(m) for m in before]
            call_msg, result_msg = later[len(before)], later[len(before) + 1]
            assert call_msg["role"] == "assistant" and call_msg["content"] is None
            call = call_msg["tool_calls"][0]
            assert call["id"] == ledger[branch["request_id"]]["tool_call"]
            assert call["function"]["name"] == branch["tool_call"]
            assert json.loads(call["function"]["arguments"])  # the streamed fragments, whole again
            assert result_msg["role"] == "tool" and result_msg["tool_call_id"] == call["id"]
            assert len(result_msg["content"]) >= 40 * 4 - 8  # the scenario's append_tokens (byte estimate)
            assert ledger[after["request_id"]]["cached_tokens"] > 0  # the prefix cache sees the same bytes
            carried += 1
    print("steps that carried a call:", carried)
    assert carried >= 2
    # a persona that offers no tools gets no calls: the next step carries text, as before
    plain = [r for r in records if r["persona"] == "plain"]
    assert plain and all(r["tool_call"] is None for r in plain)
    for r in plain:
        roles = [m["role"] for m in bodies[r["request_id"]]["messages"]]
        assert "tool" not in roles and "tools" not in bodies[r["request_id"]]


def test_anthropic_steps_carry_tool_use_and_tool_result(tmp_path: Path) -> None:
    records, ledger, bodies = _run(tmp_path, "anthropic-messages")
    carried = 0
    for steps in _steps(records, "tooled").values():
        for k in sorted(steps):
            if k + 1 not in steps:
                continue
            after = steps[k + 1][0]
            answered = ledger[after["request_id"]]["tool_results"]
            assert answered
            branch = next(r for r in steps[k] if ledger[r["request_id"]]["tool_call"] == answered[-1])
            before = bodies[branch["request_id"]]["messages"]
            later = bodies[after["request_id"]]["messages"]
            # content blocks from the first step on: the earlier prompt is the later one's start, byte for byte
            assert [_dump(m) for m in later[: len(before)]] == [_dump(m) for m in before]
            use = later[len(before)]["content"][-1]
            assert use["type"] == "tool_use" and use["id"] == answered[-1]
            assert json.loads(json.dumps(use["input"]))
            result = later[len(before) + 1]["content"][0]
            assert result == {"type": "tool_result", "tool_use_id": use["id"], "content": result["content"]}
            carried += 1
    print("steps that carried a call:", carried)
    assert carried >= 2


SUBAGENTS = """
name: e2e-subagents
seed: 9
target:
  url: testbed
  profile: vllm
  testbed:
    preset: tiny
    replicas: 1
    speed: 10
    config: {{tool_calls: {{probability: 1.0}}, request_log: "{log}"}}
  metrics: null
tiers:
  - {{name: batch, priority: 1}}
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
    subagents: {{probability: 1.0, fan_out: 3, steps: 2, prefix_tokens: 96}}
phases:
  - {{name: main, duration: 2s}}
drain_s: 8
"""


def test_subagents_spawn_share_a_prefix_and_group_under_the_task(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SUBAGENTS.format(log=log))
    result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs", processes=1))
    assert result.exit_code == 0 and result.run_dir is not None
    lines = [r for p in shard_paths(result.run_dir) for r in read_shard(p).lines]
    records = [r for r in lines if r["kind"] == "request" and not r["not_sent"]]
    tasks = {t["task_id"]: t for t in lines if t["kind"] == "task"}
    ledger = {row["request_id"]: row for row in (json.loads(x) for x in
              (result.run_dir / "testbed-ledger.jsonl").read_text().splitlines())}
    bodies = {row["request_id"]: row["body"] for row in (json.loads(x) for x in log.read_text().splitlines())}
    by_logical = {r["logical_id"]: r for r in records}
    spawns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["parent_id"]:
            spawns[r["parent_id"]].append(r)
    assert spawns, "no sub-agent request"
    complete = 0
    for parent_id, subs in spawns.items():
        parent = by_logical[parent_id]  # the spawning call is a request of the same task
        assert parent["parent_id"] == "" and parent["step"] == 1
        assert all(s["task_id"] == parent["task_id"] and s["persona"] == "lead" for s in subs)
        firsts = [s for s in subs if s["step"] == 1]
        assert {s["fanout_index"] for s in firsts} <= {0, 1, 2}
        # siblings share the swarm's context and the spawn's brief: the same first messages, byte for byte
        heads = {json.dumps(bodies[s["request_id"]]["messages"][:2]) for s in firsts}
        assert len(heads) == 1
        if len(firsts) == 3:
            complete += 1
            # the later siblings find the brief in the prefix cache (one replica)
            cached = sorted(ledger[s["request_id"]]["cached_tokens"] for s in firsts)
            assert cached[-1] > 0
        # a sub-agent's second step carries its own tool call, like its parent's steps
        for s in subs:
            if s["step"] == 2:
                assert ledger[s["request_id"]]["tool_results"]
    assert complete >= 1
    # the task's calls include its sub-agents' (the audit's task view groups them by task id)
    done = [t for t in tasks.values() if t["outcome"] == "completed"]
    assert done
    for task in done:
        mine = {r["logical_id"] for r in records if r["task_id"] == task["task_id"]}
        assert task["calls"] == len(mine) == 1 + 3 * 2 + 1
    summary = run_audit(result.run_dir)
    stats = summary.tiers[0].tasks
    assert stats is not None and stats.n == len(tasks) and stats.completed == len(done)
    # the audit counts agents on the wire from the same records (issue #18: the report showed none)
    agents = summary.tiers[0].agents
    assert agents is not None
    lead = [r for r in records if r["persona"] == "lead"]  # not the calibration probes
    assert agents.requests_with_tools == len({r["logical_id"] for r in lead})
    assert agents.tool_call_answers == sum(1 for r in lead if r["tool_call"] and r["status"] == 200) > 0
    assert agents.subagent_spawns == len(spawns)
    assert agents.subagent_requests == len({r["logical_id"] for r in records if r["parent_id"]})
    assert "spawned sub-agents" in sentences.agents_line(summary.tiers[0])
