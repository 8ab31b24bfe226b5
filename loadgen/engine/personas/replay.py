"""Trace replay in a Locust process: ``loadgen.flow.replay`` (shared with the simulator) driven with gevent."""

from __future__ import annotations

from gevent.pool import Group

from rushhour.loadgen.engine.attempts import Pools
from rushhour.loadgen.engine.context import WorkerContext
from rushhour.loadgen.engine.personas.drive import drive, host_of
from rushhour.loadgen.flow import replay
from rushhour.loadgen.workload import prompt_for as prompt_for
from rushhour.scenarios.model import TraceReplayPersona


def run_replay(ctx: WorkerContext, persona: TraceReplayPersona, group: Group) -> None:
    """This process's rows of the trace; the requests share one keep-alive pool and join ``group``."""
    ctx.group = ctx.group if ctx.group is not None else group
    host = host_of(ctx)
    pools = Pools(max_idle=min(64, replay.replay_slots(host, persona)))
    try:
        drive(host, pools, replay.run_replay(host, persona))
    finally:
        pools.close()
