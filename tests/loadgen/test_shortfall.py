"""An open loop that cannot keep up records a bounded number of not_sent lines and counts the rest."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import gevent
import pytest
from gevent.pool import Group
from wire_fakes import FakeServer

from rushhour.audit.summary import Validity
from rushhour.audit.validity import with_shortfall
from rushhour.loadgen.engine.context import WorkerContext, build_routes
from rushhour.loadgen.engine.health import run_health
from rushhour.loadgen.engine.personas.chat import run_chat
from rushhour.loadgen.engine.personas.common import BEHIND_LIMIT_S, NOT_SENT_RECORDS_PER_INTERVAL
from rushhour.records.record import Anchor, ShardWriter, read_shard
from rushhour.scenarios import parse_scenario

SCENARIO = """
name: flood
target: {{url: "http://127.0.0.1:{port}", profile: openai, metrics: null}}
tiers: [{{name: t, headers: {{x-mode: {mode}, x-silent-s: "6"}}}}]
personas:
  - {{kind: chat, name: c, tier: t, arrival: {{process: constant, rate: {rate}}}, max_concurrent_sessions: 1,
     turns: 1, system_prompt_tokens: 0, prompt_tokens: 4, output_tokens: 2}}
phases: [{{name: p, duration: {duration}}}]
drain_s: 0.5
"""


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.close()


def _ctx(tmp_path: Path, port: int, *, rate: float, duration: float, mode: str) -> WorkerContext:
    scenario = parse_scenario(SCENARIO.format(port=port, rate=rate, duration=duration, mode=mode))
    anchor = Anchor.now()
    writer = ShardWriter.for_process(tmp_path, run_id="run", anchor=anchor)
    return WorkerContext(scenario, "run", anchor, writer, build_routes(scenario, scenario.target.url))


def _drive(ctx: WorkerContext, block_s: float = 0.0) -> list[dict[str, object]]:
    group = Group()
    if block_s:
        group.spawn(lambda: (gevent.sleep(0.3), time.sleep(block_s)))  # the whole hub stalls (a blocking call)
    run_chat(ctx, ctx.scenario.personas[0], group)  # type: ignore[arg-type]
    ctx.stopping = True
    group.kill(timeout=5)
    ctx.writer.close()
    return read_shard(ctx.writer.path).lines


def test_out_of_slots_at_full_rate_is_bounded(tmp_path: Path, server: FakeServer) -> None:
    """10 000 arrivals/s with one slot held by a silent server: ~30 000 arrivals not offered in 3 s."""
    ctx = _ctx(tmp_path, server.port, rate=10_000, duration=3.0, mode="silent")
    lines = _drive(ctx)
    not_sent = [r for r in lines if r.get("kind") == "request" and r.get("not_sent")]
    events = [r for r in lines if r.get("kind") == "event" and r.get("name") == "shortfall"]
    counted = sum(int(e["detail"]["missed"]) for e in events)  # type: ignore[index]
    assert events, "no shortfall event"
    # at most the bound per interval (the 3 s phase spans up to 5 one-second intervals on a busy machine)
    assert len(not_sent) <= NOT_SENT_RECORDS_PER_INTERVAL * 6, len(not_sent)
    assert counted > 1_000  # the rest is counted, not lost
    assert ctx.counters.not_sent == len(not_sent) + counted  # the health line's total holds every one
    assert len(lines) < 1_000  # was one line per arrival: ~30 000
    detail = events[0]["detail"]
    assert detail["persona"] == "c" and detail["interval_s"] > 0  # type: ignore[index]


def test_a_loop_hopelessly_behind_counts_instead_of_sending_late(tmp_path: Path, server: FakeServer) -> None:
    """The hub is blocked for 3 s: arrivals more than BEHIND_LIMIT_S late are counted, not sent in a burst."""
    ctx = _ctx(tmp_path, server.port, rate=50, duration=4.0, mode="ok")
    lines = _drive(ctx, block_s=3.0)
    requests = [r for r in lines if r.get("kind") == "request"]
    events = [r for r in lines if r.get("kind") == "event" and r.get("name") == "shortfall"]
    counted = sum(int(e["detail"]["missed"]) for e in events)  # type: ignore[index]
    assert counted >= 20, events  # ~50 arrivals were more than 2 s late when the hub woke
    assert max(float(e["detail"]["behind_s"]) for e in events) > BEHIND_LIMIT_S  # type: ignore[index]
    lags = [(int(r["sent_ns"]) - int(r["intended_ns"])) / 1e9 for r in requests if r.get("sent_ns") is not None]
    # no burst of hopelessly late sends (a session spawned just before the stall may start after it)
    assert lags and sum(lag > BEHIND_LIMIT_S + 0.5 for lag in lags) <= 3, sorted(lags)[-10:]


def test_shortfall_events_make_the_run_invalid() -> None:
    valid = Validity(valid=True, reasons=[], loop_lag_p99_ms=None, cpu_max_percent=None, not_sent=0,
                     schedule_lag_p99_ms=None, skipped_lines=0, truncated_shards=0)
    assert with_shortfall(valid, [{"name": "worker_start"}]) == valid
    marked = with_shortfall(valid, [{"name": "shortfall", "ts_ns": 1}, {"name": "shortfall", "ts_ns": 2}])
    assert not marked.valid
    assert "2 interval(s)" in marked.reasons[0]


def test_health_keeps_running_while_the_loop_catches_up(tmp_path: Path, server: FakeServer) -> None:
    """The catching-up loop yields to the hub, so the health sampler still writes its lines."""
    ctx = _ctx(tmp_path, server.port, rate=10_000, duration=2.5, mode="silent")
    health = gevent.spawn(run_health, ctx)
    lines = _drive(ctx)
    health.kill()
    assert sum(1 for r in lines if r.get("kind") == "health") >= 1
