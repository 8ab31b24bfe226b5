"""Agent swarms in a Locust process: ``loadgen.flow.agents`` (shared with the simulator) driven with gevent."""

from __future__ import annotations

import random

from gevent.pool import Group

from rushhour.loadgen.engine.attempts import Pools
from rushhour.loadgen.engine.context import WorkerContext
from rushhour.loadgen.engine.personas.drive import drive, host_of
from rushhour.loadgen.flow import agents
from rushhour.scenarios.model import AgentSwarmPersona


def run_swarm(ctx: WorkerContext, persona: AgentSwarmPersona, group: Group) -> None:
    """Drive this process's share of a swarm; agents and tasks join ``group``."""
    ctx.group = ctx.group if ctx.group is not None else group
    drive(host_of(ctx), None, agents.run_swarm(host_of(ctx), persona))  # type: ignore[arg-type]


def agent_task(ctx: WorkerContext, persona: AgentSwarmPersona, pools: Pools, tenant: str, task_id: str,
          rng: random.Random, intended_ns: int) -> str:
    """One task on the caller's pools (a Locust ``AgentUser``'s task); returns its outcome."""
    host = host_of(ctx)
    outcome: str = drive(host, pools, agents.task(host, persona, tenant, task_id, rng, intended_ns))
    return outcome
