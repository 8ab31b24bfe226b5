"""Chat users in a Locust process: ``loadgen.flow.chat`` (shared with the simulator) driven with gevent."""

from __future__ import annotations

from gevent.pool import Group

from rushhour.loadgen.engine.context import WorkerContext
from rushhour.loadgen.engine.personas.drive import drive, host_of, run_own
from rushhour.loadgen.flow import chat
from rushhour.scenarios.model import ChatPersona


def run_chat(ctx: WorkerContext, persona: ChatPersona, group: Group) -> None:
    """Arrival loop of one chat persona in this process (its share of the rate); sessions join ``group``."""
    ctx.group = ctx.group if ctx.group is not None else group
    drive(host_of(ctx), None, chat.run_chat(host_of(ctx), persona))  # type: ignore[arg-type]


def chat_session(ctx: WorkerContext, persona: ChatPersona, instance: int, tenant: str, system: str,
             intended_ns: int) -> None:
    """One session (a Locust ``ChatUser``'s task)."""
    host = host_of(ctx)
    run_own(host, chat.session(host, persona, instance, tenant, system, intended_ns))
