"""Trace replay: each row of a real trace becomes one request at its (scaled) timestamp."""

from __future__ import annotations

import contextlib

import gevent
from gevent.pool import Group

from loadgen import prompts
from loadgen.engine.attempts import Logical, Pools, send_logical
from loadgen.engine.context import WorkerContext
from loadgen.engine.personas.common import behind, not_sent, sleep_until
from loadgen.engine.wire.client import Cancelled
from loadgen.schedule import mine, worker_slots
from loadgen.traces import MOONCAKE_BLOCK_TOKENS, TraceRow, read_trace, schedule
from scenarios.distributions import resolve_trace_path
from scenarios.model import TraceReplayPersona


def prompt_for(persona: TraceReplayPersona, row: TraceRow) -> prompts.Conversation:
    """The prompt of one row: Mooncake rows reuse one text per block id, so shared blocks share bytes."""
    tokens = min(row.prompt_tokens, persona.max_prompt_tokens)
    if not row.hash_ids:
        return prompts.Conversation("", [("user", prompts.text(f"trace:{persona.name}:{row.index}", tokens))])
    pieces: list[str] = []
    remaining = tokens
    for block in row.hash_ids:
        if remaining <= 0:
            break
        size = min(MOONCAKE_BLOCK_TOKENS, remaining)
        # a full block is the same text wherever it appears; a partial tail block is its own text
        key = f"mc:{block}" if size == MOONCAKE_BLOCK_TOKENS else f"mc:{block}:{size}"
        pieces.append(prompts.text(key, size))
        remaining -= size
    if remaining > 0:
        pieces.append(prompts.text(f"trace:{persona.name}:{row.index}:tail", remaining))
    return prompts.Conversation("", [("user", "".join(pieces))])


def run_replay(ctx: WorkerContext, persona: TraceReplayPersona, group: Group) -> None:
    rows = read_trace(resolve_trace_path(persona.trace), persona.format)
    plan = schedule(rows, time_scale=persona.time_scale, start_s=persona.start_s, limit=persona.limit, end_s=ctx.end_s)
    slots = worker_slots(persona.max_in_flight, ctx.workers, ctx.worker_index)
    tenants = ctx.scenario.tier(persona.tier).tenant_ids
    pools = Pools(max_idle=min(64, slots))
    try:
        _replay_rows(ctx, persona, group, plan, slots, tenants, pools)
    finally:
        if persona.name in ctx.shortfalls:
            ctx.shortfalls[persona.name].flush()


def _replay_rows(
    ctx: WorkerContext,
    persona: TraceReplayPersona,
    group: Group,
    plan: list[tuple[float, TraceRow]],
    slots: int,
    tenants: list[str],
    pools: Pools,
) -> None:
    active: set[gevent.Greenlet] = set()
    for n, (when, row) in enumerate(plan):
        if not mine(n, ctx.worker_index, ctx.workers):
            continue
        sleep_until(ctx, when)
        if ctx.stopping:
            return
        if behind(ctx, persona.name, when):
            continue  # hopelessly late: counted in the shortfall, not sent
        tenant = tenants[row.index % len(tenants)]
        max_tokens = max(1, min(row.output_tokens, persona.max_output_tokens))
        intended_ns = int(when * 1e9)
        session = f"{persona.name}-r{row.index}"
        if len(active) >= slots:
            not_sent(
                ctx,
                Logical(
                    persona.tier,
                    tenant,
                    persona.name,
                    prompts.Conversation(),
                    max_tokens,
                    intended_ns,
                    session_id=session,
                ),
            )
            continue
        req = Logical(
            persona.tier, tenant, persona.name, prompt_for(persona, row), max_tokens, intended_ns, session_id=session
        )
        glet = group.spawn(_one, ctx, pools, req)
        active.add(glet)
        glet.link(active.discard)


def _one(ctx: WorkerContext, pools: Pools, req: Logical) -> None:
    with contextlib.suppress(Cancelled):
        send_logical(ctx, pools, req)
