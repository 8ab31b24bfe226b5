"""Agent-trace replay in a Locust process: ``loadgen.flow.agent_trace`` (shared with the simulator), with gevent."""

from __future__ import annotations

from gevent.pool import Group

from rushhour.loadgen.engine.context import WorkerContext
from rushhour.loadgen.engine.personas.drive import drive, host_of
from rushhour.loadgen.flow import agent_trace
from rushhour.scenarios.model import AgentTracePersona


def run_agent_trace(ctx: WorkerContext, persona: AgentTracePersona, group: Group) -> None:
    """This process's sessions of the trace; sessions and their sub-agents join ``group``."""
    ctx.group = ctx.group if ctx.group is not None else group
    drive(host_of(ctx), None, agent_trace.run_agent_trace(host_of(ctx), persona))  # type: ignore[arg-type]
