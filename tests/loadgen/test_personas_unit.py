"""Personas in-process against the fake server: open-loop not_sent, cancellation, credentials never recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gevent
import pytest
from gevent.pool import Group
from wire_fakes import FakeServer

from rushhour.loadgen.engine.attempts import Logical, Pools
from rushhour.loadgen.engine.context import WorkerContext, build_routes
from rushhour.loadgen.engine.personas.agents import run_swarm
from rushhour.loadgen.engine.personas.chat import run_chat
from rushhour.loadgen.engine.personas.drive import send_logical
from rushhour.loadgen.engine.wire.client import Cancelled
from rushhour.loadgen.prompts import Conversation
from rushhour.records.record import Anchor, ShardWriter, read_shard
from rushhour.scenarios import parse_scenario

SCENARIO = """
name: unit
seed: 5
target: {{url: "http://127.0.0.1:{port}", profile: {profile}}}
tiers:
  - {{name: gold, priority: 10, tenants: 2, credential: "env:RH_UNIT_KEY", headers: {{x-mode: {mode}}}}}
personas:
  - kind: chat
    name: chat
    tier: gold
    arrival: {{process: constant, rate: 20}}
    max_concurrent_sessions: 1
    turns: 3
    think_time_s: 0.3
    system_prompt_tokens: 8
    prompt_tokens: 10
    output_tokens: 3
  - kind: agent_swarm
    name: swarm
    tier: gold
    agents: 2
    ramp_s: 0
    steps: 2
    fanout: 3
    tool_time_s: 0.05
    shared_context_tokens: 16
    task_context_tokens: 8
    append_tokens: 8
    output_tokens: 3
phases: [{{name: p, duration: 0.5}}]
drain_s: 0.5
"""

SECRET = "sk-unit-SECRETSECRET0123456789"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.close()


def make_ctx(tmp_path: Path, port: int, mode: str = "ok", profile: str = "openai") -> WorkerContext:
    scenario = parse_scenario(SCENARIO.format(port=port, mode=mode, profile=profile))
    anchor = Anchor.now()
    writer = ShardWriter.for_process(tmp_path, run_id="run", anchor=anchor)
    return WorkerContext(scenario, "run", anchor, writer, build_routes(scenario, scenario.target.url))


def test_open_loop_overflow_is_recorded_not_sent(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RH_UNIT_KEY", SECRET)
    ctx = make_ctx(tmp_path, server.port)
    group = Group()
    run_chat(ctx, ctx.scenario.personas[0], group)  # type: ignore[arg-type]
    group.join(timeout=5)
    ctx.writer.close()
    lines = read_shard(ctx.writer.path).lines
    requests = [r for r in lines if r["kind"] == "request"]
    skipped = [r for r in requests if r["not_sent"]]
    sent = [r for r in requests if not r["not_sent"]]
    assert len(skipped) >= 5 and all(r["intended_ns"] is not None and r["sent_ns"] is None for r in skipped)
    assert sent and all(r["complete"] for r in sent)
    # arrivals at 20/s are 50 ms apart: the intended times say so, whatever the generator did
    intended = sorted(r["intended_ns"] for r in requests if r["step"] == 0)
    assert intended[:3] == [50_000_000, 100_000_000, 150_000_000]
    tasks = [r for r in lines if r["kind"] == "task"]
    assert tasks and {t["outcome"] for t in tasks} <= {"completed", "cancelled"}
    # the key never reaches the shard; the fingerprint does
    raw = ctx.writer.path.read_bytes()
    assert SECRET.encode() not in raw and b"SECRETSECRET" not in raw
    assert sent[0]["key_fingerprint"].startswith("fp:")


def test_hostile_server_echoing_the_key_is_redacted(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RH_UNIT_KEY", SECRET)
    ctx = make_ctx(tmp_path, server.port, mode="echoauth")
    tier = ctx.scenario.tiers[0]
    req = Logical("gold", tier.tenant_ids[0], "chat", Conversation("", [("user", "x")]), 3, 0)
    record = send_logical(ctx, Pools(), req)
    ctx.writer.close()
    assert record.status == 401
    assert SECRET.encode() not in ctx.writer.path.read_bytes()


def test_swarm_fanout_and_cancellation(tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RH_UNIT_KEY", SECRET)
    ctx = make_ctx(tmp_path, server.port, profile="llm-d")
    group = Group()
    run_swarm(ctx, ctx.scenario.personas[1], group)  # type: ignore[arg-type]
    with gevent.Timeout(5):
        while ctx.counters.in_flight < 3:  # mid-stream of a fan-out
            gevent.sleep(0.001)
    group.kill(exception=Cancelled, block=True, timeout=5)
    ctx.writer.close()
    lines = read_shard(ctx.writer.path).lines
    requests = [r for r in lines if r["kind"] == "request"]
    assert {r["fanout_index"] for r in requests} == {0, 1, 2}
    assert any(r["cancelled"] for r in requests)
    tasks = [r for r in lines if r["kind"] == "task"]
    assert len(tasks) == 2 and {t["outcome"] for t in tasks} == {"cancelled"}
    assert all(t["deadline_ns"] and t["ideal_ns"] for t in tasks)
