"""Chat users: sessions arrive open-loop; turns inside a session are closed-loop with think time."""

from __future__ import annotations

import gevent
from gevent.pool import Group

from loadgen import prompts
from loadgen.engine.attempts import Logical, Pools, send_logical
from loadgen.engine.context import WorkerContext
from loadgen.engine.personas.common import Slots, close_task, count_call, new_task, not_sent, open_loop, sleep_until
from loadgen.engine.wire.client import Cancelled
from loadgen.schedule import unit_work, worker_share, worker_slots
from scenarios.model import ChatPersona


def run_chat(ctx: WorkerContext, persona: ChatPersona, group: Group) -> None:
    """Arrival loop of one chat persona in this process (its share of the rate)."""
    rng = ctx.rng(persona.name, ctx.worker_index, "arrivals")
    rate = worker_share(persona.arrival.rate, ctx.workers)
    slots = worker_slots(persona.max_concurrent_sessions, ctx.workers, ctx.worker_index)
    tenants = ctx.scenario.tier(persona.tier).tenant_ids
    system = (
        prompts.text(f"system:{persona.name}", persona.system_prompt_tokens) if persona.system_prompt_tokens else ""
    )
    slots_ = Slots(slots)
    for instance, t in open_loop(ctx, rate, lambda: unit_work(persona.arrival, rng), persona.name):
        session_rng = ctx.rng(persona.name, ctx.worker_index, instance)
        tenant = session_rng.choice(tenants)
        intended_ns = int(t * 1e9)
        if slots_.full():
            session_id = f"{persona.name}-w{ctx.worker_index}-{instance}"
            not_sent(
                ctx,
                Logical(
                    persona.tier, tenant, persona.name, prompts.Conversation(), 0, intended_ns, session_id=session_id
                ),
            )
            continue
        slots_.spawn(group, _session, ctx, persona, instance, tenant, system, intended_ns)


def _session(
    ctx: WorkerContext, persona: ChatPersona, instance: int, tenant: str, system: str, intended_ns: int
) -> None:
    rng = ctx.rng(persona.name, ctx.worker_index, instance, "session")
    session_id = f"{persona.name}-w{ctx.worker_index}-{instance}"
    task = new_task(ctx, persona.name, persona.tier, tenant, session_id)
    task.task_id = session_id
    turns = persona.turns.sample_int(rng, lowest=1)
    # patience draws from its own stream: adding it to a scenario leaves every other sample unchanged
    patience_rng = ctx.rng(persona.name, ctx.worker_index, instance, "patience")
    conv = prompts.Conversation(system)
    pools = Pools(max_idle=1)
    outcome = "completed"
    try:
        for turn in range(turns):
            if turn > 0:
                think = persona.think_time_s.sample(rng)
                sleep_until(ctx, ctx.now_s() + think)
                if ctx.stopping or ctx.now_s() >= ctx.end_s:
                    outcome = "cancelled"  # the run ended before the user's next turn
                    break
                intended_ns = ctx.now_ns()
            new_text = prompts.text(f"{session_id}:u{turn}", persona.prompt_tokens.sample_int(rng, lowest=1))
            max_tokens = persona.output_tokens.sample_int(rng, lowest=1)
            asks_left = persona.abandon_retries if persona.on_abandon == "retry" else 0
            while True:
                patience = persona.patience_s.sample(patience_rng) if persona.patience_s is not None else None
                req = Logical(
                    persona.tier,
                    tenant,
                    persona.name,
                    conv.with_user(new_text),
                    max_tokens,
                    intended_ns,
                    session_id=session_id,
                    task_id=session_id,
                    step=turn,
                    patience_s=patience,
                )
                record = send_logical(ctx, pools, req)
                # a user who gave up asks again (a new request, sent now) while re-asks are left
                if not record.abandoned or asks_left <= 0 or ctx.stopping or ctx.now_s() >= ctx.end_s:
                    break
                asks_left -= 1
                task.calls += 1
                task.calls_failed += 1
                task.first_failure = task.first_failure or "abandoned"
                intended_ns = ctx.now_ns()
            task.steps += 1
            if not count_call(task, record):
                outcome = "abandoned" if record.abandoned else "failed"
                break
            produced = record.output_tokens or record.tokens or max_tokens
            conv.append("user", new_text)
            conv.append("assistant", prompts.text(f"{session_id}:a{turn}", produced))
    except (Cancelled, gevent.GreenletExit):
        outcome = "cancelled"
        raise
    finally:
        pools.close()
        close_task(ctx, task, outcome)
