"""Dataset prompts against the testbed: sessions replay sampled conversations turn by turn (seeded), with the
persona's shared system prefix first and every turn's prompt starting with the last one byte for byte."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support import rushhour

from rushhour.loadgen.datasets import read_dataset
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.record import read_shard, shard_paths
from rushhour.scenarios.distributions import BUNDLED_DATASETS

pytestmark = pytest.mark.e2e

SCENARIO = """
name: e2e-dataset
seed: {seed}
target:
  url: testbed
  profile: vllm
  testbed:
    preset: tiny
    replicas: 1
    speed: 10
    config: {{request_log: "{log}"}}
  metrics: null
tiers:
  - {{name: interactive, priority: 0}}
personas:
  - kind: chat
    name: users
    tier: interactive
    arrival: {{process: poisson, rate: 6}}
    think_time_s: 0.05
    system_prompt_tokens: 48
    dataset: {{path: chat-mini.jsonl}}
  - kind: agent_swarm
    name: agents
    tier: interactive
    agents: 1
    ramp_s: 0
    steps: 2
    fanout: 1
    tool_time_s: 0.05
    shared_context_tokens: 32
    append_tokens: 16
    output_tokens: 4
    deadline_s: 30
    dataset: {{path: chat-mini.jsonl}}
phases:
  - {{name: main, duration: 3s}}
drain_s: 6
"""


def _run(tmp_path: Path, seed: int) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "requests.jsonl"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(log=log, seed=seed))
    result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs", processes=1))
    assert result.exit_code == 0 and result.run_dir is not None
    records = [r for p in shard_paths(result.run_dir) for r in read_shard(p).lines
               if r["kind"] == "request" and not r["not_sent"] and r["persona"] in ("users", "agents")]
    bodies = {row["request_id"]: row["body"] for row in (json.loads(x) for x in log.read_text().splitlines())}
    return records, bodies


def test_sessions_replay_sampled_conversations_with_a_shared_prefix(tmp_path: Path) -> None:
    dialogs = read_dataset(BUNDLED_DATASETS / "chat-mini.jsonl")
    by_first = {d.turns[0].user: d for d in dialogs}
    records, bodies = _run(tmp_path / "a", seed=3)
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["persona"] == "users":
            sessions[r["session_id"]].append(r)
    assert len(sessions) >= 8
    systems = set()
    multi = 0
    for turns in sessions.values():
        turns.sort(key=lambda r: r["step"])
        msgs = [bodies[r["request_id"]]["messages"] for r in turns]
        system, first_user = msgs[0][0], msgs[0][1]
        dialog = by_first[first_user["content"]]  # the session replays one conversation of the dataset
        systems.add(system["content"][:150])
        assert system["role"] == "system" and system["content"].endswith(dialog.system or system["content"])
        for k, (r, m) in enumerate(zip(turns, msgs, strict=True)):
            assert m[-1] == {"role": "user", "content": dialog.turns[k].user}
            assert r["max_tokens"] == -(-len((dialog.turns[k].reply or "").encode()) // 4)  # the answer's size
            if k:
                prev = msgs[k - 1]
                assert json.dumps(m[: len(prev)]) == json.dumps(prev)  # byte-identical history
                assert m[len(prev)] == {"role": "assistant", "content": dialog.turns[k - 1].reply}
        multi += len(turns) > 1
    assert multi >= 2
    # every session starts with the persona's one shared system text: a prefix all of them share
    assert len({s[:150] for s in systems}) == 1
    # agents: the task's context after the shared one is a conversation's first turn
    agent_ctx = [bodies[r["request_id"]]["messages"][1]["content"] for r in records
                 if r["persona"] == "agents" and r["step"] == 1]
    assert agent_ctx and all(c.split("\n\n")[-1] in by_first for c in agent_ctx)
    # the same seed samples the same conversations
    again, bodies2 = _run(tmp_path / "b", seed=3)

    def picks(recs: list[dict[str, Any]], b: dict[str, dict[str, Any]]) -> dict[str, str]:
        return {r["session_id"]: b[r["request_id"]]["messages"][1]["content"]
                for r in recs if r["persona"] == "users" and r["step"] == 0}

    first, second = picks(records, bodies), picks(again, bodies2)
    common = set(first) & set(second)
    assert len(common) >= 8 and all(first[s] == second[s] for s in common)


def test_a_bad_dataset_is_one_line_before_any_run(tmp_path: Path) -> None:
    shutil.copy(BUNDLED_DATASETS / "chat-mini.jsonl", tmp_path / "mine.jsonl")
    with (tmp_path / "mine.jsonl").open("a") as f:
        f.write('{"conversations": [{"from": "narrator", "value": "once"}]}\n')
    (tmp_path / "s.yaml").write_text(SCENARIO.format(log=tmp_path / "r.jsonl", seed=1)
                                     .replace("chat-mini.jsonl", "mine.jsonl"))
    out = rushhour("scenario", "check", str(tmp_path / "s.yaml"), timeout=120)
    assert out.returncode == 2
    assert "mine.jsonl:25: conversations[0]: unknown speaker 'narrator'" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
