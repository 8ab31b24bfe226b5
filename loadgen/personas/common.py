"""Shared persona helpers: sleeping to a schedule, task records, the not-sent record."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import gevent
from gevent.pool import Group

from loadgen.attempts import Logical, new_attempt_record
from loadgen.context import WorkerContext
from loadgen.record import RequestRecord, TaskRecord
from loadgen.resilience import is_served
from loadgen.schedule import next_arrival


def sleep_until(ctx: WorkerContext, t_s: float) -> None:
    """Sleep until ``t_s`` seconds after the anchor (returns at once when it has passed)."""
    delay = t_s - ctx.now_s()
    if delay > 0:
        gevent.sleep(delay)


def open_loop(ctx: WorkerContext, rate: float, draw: Callable[[], float]) -> Iterator[tuple[int, float]]:
    """Open-loop arrivals at ``rate`` (scaled by the phases): sleeps to each, yields (instance, t_s)."""
    t, instance = 0.0, 0
    while not ctx.stopping:
        arrival = next_arrival(t, draw(), rate, ctx.scenario.phases, ctx.end_s)
        if arrival is None:
            return
        t = arrival
        instance += 1
        sleep_until(ctx, t)
        if ctx.stopping:
            return
        yield instance, t


class Slots:
    """At most ``limit`` sessions or tasks at once; an arrival that finds none free is not sent."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._active: set[gevent.Greenlet] = set()

    def full(self) -> bool:
        return len(self._active) >= self.limit

    def spawn(self, group: Group, fn: Callable[..., Any], *args: Any) -> None:
        glet = group.spawn(fn, *args)
        self._active.add(glet)
        glet.link(self._active.discard)


def new_task(ctx: WorkerContext, persona: str, tier: str, tenant: str, session_id: str = "") -> TaskRecord:
    return TaskRecord(
        run_id=ctx.run_id,
        seq=0,
        task_id=uuid.uuid4().hex,
        persona=persona,
        tier=tier,
        tenant=tenant,
        session_id=session_id,
        start_ns=ctx.now_ns(),
    )


def close_task(ctx: WorkerContext, task: TaskRecord, outcome: str) -> None:
    task.seq = ctx.writer.next_seq()
    task.end_ns = ctx.now_ns()
    task.outcome = outcome
    ctx.write(task)


def count_call(task: TaskRecord, record: RequestRecord) -> bool:
    """Book one logical call on a task; True when it was served."""
    task.calls += 1
    ok = is_served(record)
    if not ok:
        task.calls_failed += 1
        if task.first_failure is None:
            task.first_failure = _describe(record)
    return ok


def _describe(record: RequestRecord) -> str:
    if record.cancelled:
        return "cancelled"
    if record.client_timeout:
        return "timeout"
    if record.transport_error or record.status == 0:
        return f"transport {record.reason or record.error or ''}".strip()
    if record.in_band_error:
        return f"in_band {record.reason or ''}".strip()
    if 200 <= record.status < 300:
        return "incomplete"
    return f"{record.status} {record.reason or ''}".strip()


def not_sent(ctx: WorkerContext, req: Logical) -> RequestRecord:
    """The schedule wanted a request sent but the generator had no free slot: record it, send nothing."""
    record = new_attempt_record(ctx, req, ctx.routes[0], not_sent=True)
    record.sent_ns = None
    record.done_ns = ctx.now_ns()
    ctx.counters.not_sent += 1
    ctx.write(record)
    return record


def monotonic_s() -> float:
    return time.monotonic()
