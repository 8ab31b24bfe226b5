"""The generator's own health: event-loop lag and CPU, sampled every second into the shard."""

from __future__ import annotations

import os
import time

import gevent
import psutil

from rushhour.loadgen.engine.context import WorkerContext
from rushhour.loadgen.schedule import phase_index
from rushhour.records.record import HealthRecord

TICK_S = 0.1  # a 100 ms timer: how late it fires is the loop's lag
SAMPLE_S = 1.0


def run_health(ctx: WorkerContext) -> None:
    """Write a ``HealthRecord`` every second and flush the shard (so a kill -9 loses ≤ 1 s)."""
    proc = psutil.Process()
    pid = os.getpid()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
    proc.cpu_percent(None)
    last_phase: int | None = None
    while not ctx.writer.closed:
        worst = 0
        window_end = time.monotonic() + SAMPLE_S
        while time.monotonic() < window_end:
            before = time.monotonic_ns()
            gevent.sleep(TICK_S)
            lag = time.monotonic_ns() - before - int(TICK_S * 1e9)
            worst = max(worst, lag)
        if ctx.writer.closed:
            return
        c = ctx.counters
        ctx.write(
            HealthRecord(
                ctx.run_id,
                ctx.writer.next_seq(),
                ctx.now_ns(),
                worst,
                proc.cpu_percent(None),
                c.in_flight,
                c.not_sent,
                c.sent,
                pid,
                ctx.worker_index,
                ctx.workers,
                _load1(),
                cpus,
            )
        )
        phase = phase_index(ctx.scenario.phases, ctx.now_s())
        if phase != last_phase and ctx.worker_index == 0 and phase is not None:
            ctx.event("phase", phase=ctx.scenario.phases[phase].name, index=phase)
        last_phase = phase
        ctx.writer.flush()


def _load1() -> float | None:
    """The host's 1-minute load average (None where the OS keeps none): is someone else using the cores?"""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
