"""One process's whole share of a scenario: persona drivers, health sampler, drain and hard stop."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gevent
from gevent.pool import Group

from rushhour.loadgen.engine.context import WorkerContext
from rushhour.loadgen.engine.health import run_health
from rushhour.loadgen.engine.personas.agent_trace import run_agent_trace
from rushhour.loadgen.engine.personas.agents import run_swarm
from rushhour.loadgen.engine.personas.chat import run_chat
from rushhour.loadgen.engine.personas.common import sleep_until
from rushhour.loadgen.engine.personas.replay import run_replay
from rushhour.loadgen.engine.wire.client import Cancelled
from rushhour.scenarios.kinds import every_kind

CANCEL_GRACE_S = 5.0
# each persona kind's driver loop in a load process, by the scenario's ``kind`` (the simulator's: loadgen/flow/kinds)
DRIVERS: Mapping[str, Callable[[WorkerContext, Any, Group], None]] = every_kind(
    {"chat": run_chat, "agent_swarm": run_swarm, "trace_replay": run_replay, "agent_trace": run_agent_trace}, __name__)


class Worker:
    """Starts the drivers at the anchor, stops arrivals at the end, cancels in-flight at the hard stop."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.group = Group()  # sessions, tasks, replayed requests and control twins
        ctx.group = self.group
        self.drivers = Group()  # arrival loops
        self.health: gevent.Greenlet | None = None

    def run(self) -> None:
        """Block until the schedule (phases + drain) is over; safe to kill (then call ``cancel``)."""
        ctx = self.ctx
        self.health = gevent.spawn(run_health, ctx)
        for persona in ctx.scenario.personas:
            self.drivers.spawn(DRIVERS[persona.kind], ctx, persona, self.group)
        try:
            while ctx.now_s() < ctx.end_s and not ctx.stopping:
                gevent.sleep(min(0.25, max(0.0, ctx.end_s - ctx.now_s())))
            ctx.stopping = True
            self.drivers.kill(block=True, timeout=2)
            # drain: in-flight work may finish until the hard stop
            while len(self.group) and ctx.now_s() < ctx.hard_stop_s:
                if ctx.stop_reason == "budget" and ctx.counters.in_flight == 0 and ctx.budget_in_flight() == 0:
                    break  # the run's budget is spent: nothing will be sent, only idle sessions wait
                gevent.sleep(0.1)
            if ctx.stop_reason is None:
                ctx.stop_reason = "completed"
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Cancel everything still running: attempts are recorded ``cancelled=True``."""
        self.ctx.stopping = True
        self.drivers.kill(block=False)
        self.group.kill(exception=Cancelled, block=True, timeout=CANCEL_GRACE_S)

    def close(self) -> None:
        """Stop the sampler and close the shard (idempotent)."""
        self.cancel()
        if self.health is not None:
            self.health.kill(block=False)
        self.ctx.writer.close()


def wait_until(ctx: WorkerContext, t_s: float) -> None:
    sleep_until(ctx, t_s)
