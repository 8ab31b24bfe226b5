"""A Locust process's persona bookkeeping: sleeping to a schedule, task records, the not-sent record, the shortfall."""

from __future__ import annotations

import uuid

import gevent

from rushhour.loadgen.engine.attempts import Logical, new_attempt_record
from rushhour.loadgen.engine.context import WorkerContext
from rushhour.records.record import RequestRecord, TaskRecord


def sleep_until(ctx: WorkerContext, t_s: float) -> None:
    """Sleep until ``t_s`` seconds after the anchor (returns at once when it has passed)."""
    delay = t_s - ctx.now_s()
    if delay > 0:
        gevent.sleep(delay)


# A generator that cannot keep up must not flood its shard: each arrival it could not serve gets its own
# not_sent record only up to NOT_SENT_RECORDS_PER_INTERVAL per persona and interval; past that, and for
# arrivals more than BEHIND_LIMIT_S late (the loop fell hopelessly behind), they are only counted, and one
# `shortfall` event per interval says how many (the audit marks the run invalid from it).
SHORTFALL_INTERVAL_S = 1.0
NOT_SENT_RECORDS_PER_INTERVAL = 50
BEHIND_LIMIT_S = 2.0
_YIELD_EVERY = 256  # catching up on missed arrivals still lets the hub run (health, stop, other users)


class Shortfall:
    """Counts one persona's arrivals that were not offered, and writes them as one event per interval."""

    def __init__(self, ctx: WorkerContext, persona: str) -> None:
        self.ctx = ctx
        self.persona = persona
        self.start_s = ctx.now_s()
        self.records = 0  # not_sent records written in this interval
        self.missed = 0  # arrivals only counted in this interval
        self.behind_s = 0.0  # the largest lateness seen in this interval
        self.total_missed = 0

    def _roll(self, now_s: float) -> None:
        if now_s - self.start_s >= SHORTFALL_INTERVAL_S:
            self.flush(now_s)

    def flush(self, now_s: float | None = None) -> None:
        """Write the interval's event (if anything was only counted) and start a new interval."""
        now_s = self.ctx.now_s() if now_s is None else now_s
        if self.missed:
            self.ctx.event(
                "shortfall", persona=self.persona, missed=self.missed, recorded=self.records,
                interval_s=round(now_s - self.start_s, 3), behind_s=round(self.behind_s, 3),
            )
        self.start_s, self.records, self.missed, self.behind_s = now_s, 0, 0, 0.0

    def take_record(self) -> bool:
        """May this not-sent arrival have its own record (False: it is counted instead)?"""
        self._roll(self.ctx.now_s())
        if self.records < NOT_SENT_RECORDS_PER_INTERVAL:
            self.records += 1
            return True
        self.count()
        return False

    def count(self, behind_s: float = 0.0) -> None:
        """One arrival not offered and not recorded on its own."""
        self._roll(self.ctx.now_s())
        self.missed += 1
        self.total_missed += 1
        self.behind_s = max(self.behind_s, behind_s)
        self.ctx.counters.not_sent += 1
        if self.total_missed % _YIELD_EVERY == 0:
            gevent.sleep(0)


def shortfall(ctx: WorkerContext, persona: str) -> Shortfall:
    """The shortfall counter of one persona in this process."""
    found = ctx.shortfalls.get(persona)
    if found is None:
        found = ctx.shortfalls[persona] = Shortfall(ctx, persona)
    return found


def behind(ctx: WorkerContext, persona: str, t_s: float) -> bool:
    """True (and counted) when the arrival at ``t_s`` is hopelessly late: it is not sent at all."""
    late = ctx.now_s() - t_s
    if late <= BEHIND_LIMIT_S:
        return False
    shortfall(ctx, persona).count(late)
    return True


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


def not_sent(ctx: WorkerContext, req: Logical) -> RequestRecord | None:
    """The schedule wanted a request sent but the generator had no free slot: record it, send nothing.

    Past the persona's per-interval bound the arrival is only counted (``Shortfall``): None.
    """
    if not shortfall(ctx, req.persona).take_record():
        return None
    record = new_attempt_record(ctx, req, ctx.routes[0], not_sent=True)
    record.sent_ns = None
    record.done_ns = ctx.now_ns()
    ctx.counters.not_sent += 1
    ctx.write(record)
    return record


