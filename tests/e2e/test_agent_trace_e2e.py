"""An agent trace through `rushhour run` on the testbed and through `rushhour simulate`: the trace's fan-out reaches
the report's agents section (per session, as many calls, sub-agent calls and spawns as the trace has), a call
leaves only after the answer it follows, and a carried prompt starts with its predecessor's prompt byte for byte."""

from __future__ import annotations

import itertools
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support import REPO, run, rushhour

from rushhour.loadgen.agent_traces import read_agent_trace
from rushhour.records.record import read_shard, shard_paths

pytestmark = pytest.mark.e2e

SAMPLE = REPO / "examples" / "agent-trace" / "weka-sample.jsonl"
SCENARIO = """
name: e2e-agent-trace
seed: 3
target:
  url: testbed
  profile: vllm
  testbed: {{preset: tiny, replicas: 1, speed: 10, config: {{request_log: "{log}"}}}}
  metrics: null
tiers:
  - {{name: interactive, priority: 10}}
  - {{name: batch, priority: 1}}
personas:
  - kind: agent_trace
    name: coders
    tier: interactive
    trace: weka-sample.jsonl
    session_gap_s: 0.5
    time_scale: 2
    subagent_tiers: {{Explore: batch}}
phases:
  - {{name: main, duration: 6s}}
drain_s: 15
calibration: {{probes: 0}}
"""


def _summary_agents(run_dir: Path) -> dict[str, Any]:
    tiers = json.loads((run_dir / "summary.json").read_text())["tiers"]
    return {t["name"]: t.get("agents") for t in tiers}


def _by_session(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in shard_paths(run_dir):
        for r in read_shard(path).lines:
            if r["kind"] == "request" and r["persona"] == "coders" and not r["not_sent"]:
                out[r["session_id"]].append(r)
    return out


def _expected() -> tuple[dict[str, tuple[int, int, int]], int, int]:
    """Per session id (as the run names it): (calls, sub-agent calls, spawning calls); the last two's totals."""
    sessions = read_agent_trace(SAMPLE)
    per = {f"coders-{s.session_id}": (s.calls, s.subagent_calls, s.spawning_calls) for s in sessions}
    return per, sum(s.spawning_calls for s in sessions), sum(s.subagent_calls for s in sessions)


def test_run_replays_the_tree_with_its_fan_out_order_and_prefixes(tmp_path: Path) -> None:
    shutil.copy(SAMPLE, tmp_path / SAMPLE.name)
    log = tmp_path / "requests.jsonl"
    done, run_dir, _ = run(SCENARIO.format(log=log), tmp_path)
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: a busy host may make the run invalid for latency
    per, spawns, sub_calls = _expected()
    sessions = _by_session(run_dir)
    assert {sid: (len(rs), sum(1 for r in rs if r["parent_id"]), len({r["parent_id"] for r in rs if r["parent_id"]}))
            for sid, rs in sessions.items()} == per
    # the report's agents section: the sub-agents' calls are in batch (subagent_tiers), their spawns counted there
    agents = _summary_agents(run_dir)
    assert agents["batch"]["subagent_spawns"] == spawns and agents["batch"]["subagent_requests"] == sub_calls
    assert "call(s) spawned sub-agents" in (run_dir / "report.md").read_text()
    records = [r for rs in sessions.values() for r in rs]
    assert all(r["tier"] == ("batch" if r["parent_id"] else "interactive") for r in records)
    by_logical = {r["logical_id"]: r for r in records}
    bodies = {row["request_id"]: row["body"]["messages"] for row in map(json.loads, log.read_text().splitlines())}
    for rs in sessions.values():
        chains: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for r in rs:
            chains[(r["parent_id"], r["fanout_index"])].append(r)
        for (parent, _), chain in chains.items():
            chain.sort(key=lambda r: r["step"])
            assert [r["step"] for r in chain] == list(range(1, len(chain) + 1))
            if parent:  # a sub-agent leaves only after the answer of the call that spawned it
                assert chain[0]["sent_ns"] >= by_logical[parent]["done_ns"]
            carried = 0
            for before, after in itertools.pairwise(chain):
                assert after["sent_ns"] >= before["done_ns"]  # and each call after its agent's previous answer
                old, new = bodies[before["request_id"]], bodies[after["request_id"]]
                if len(new) > len(old):  # carried: the earlier prompt, message for message, then the answer
                    assert new[: len(old)] == old and new[len(old)]["role"] == "assistant"
                    carried += 1
            assert carried == len(chain) - 1  # the sample's contexts only grow
    # the main agent goes on only when every sub-agent it spawned has answered
    for rs in sessions.values():
        subs = [r for r in rs if r["parent_id"]]
        spawner = by_logical[subs[0]["parent_id"]]
        after = next(r for r in rs if not r["parent_id"] and r["step"] == spawner["step"] + 1)
        assert after["sent_ns"] >= max(r["done_ns"] for r in subs)


def test_simulate_replays_the_same_tree(tmp_path: Path) -> None:
    shutil.copy(SAMPLE, tmp_path / SAMPLE.name)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(log=tmp_path / "requests.jsonl"))
    done = rushhour("simulate", str(scenario), "--out", str(tmp_path / "runs"), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
    per, spawns, sub_calls = _expected()
    sessions = _by_session(run_dir)
    assert {sid: (len(rs), sum(1 for r in rs if r["parent_id"])) for sid, rs in sessions.items()} == \
        {sid: v[:2] for sid, v in per.items()}
    agents = _summary_agents(run_dir)
    assert agents["batch"]["subagent_spawns"] == spawns and agents["batch"]["subagent_requests"] == sub_calls
    tasks = [r for p in shard_paths(run_dir) for r in read_shard(p).lines if r["kind"] == "task"]
    assert sorted((t["session_id"], t["outcome"], t["calls"]) for t in tasks) == \
        sorted((sid, "completed", v[0]) for sid, v in per.items())
