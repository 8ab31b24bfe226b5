"""Agent swarms: each task loops fan-out → tool quiet → return with a longer, byte-identical prefix."""

from __future__ import annotations

import random
from dataclasses import dataclass

import gevent
from gevent.pool import Group

from loadgen import prompts
from loadgen.engine.attempts import Logical, Pools, send_logical
from loadgen.engine.context import WorkerContext
from loadgen.engine.personas.common import Slots, close_task, count_call, new_task, not_sent, open_loop, sleep_until
from loadgen.engine.wire.client import Cancelled
from loadgen.record import RequestRecord
from loadgen.schedule import (
    agents_scale,
    mine,
    phase_index,
    worker_share,
    worker_slots,
)
from scenarios.model import AgentSwarmPersona

# Ideal-time estimate for a deadline factor: a call on an idle stack (assumed, documented).
IDEAL_TTFT_S = 0.2
IDEAL_TPOT_S = 0.02
BRANCH_NOTE_TOKENS = 16
FAILED_TASK_PAUSE_S = 1.0


@dataclass(slots=True)
class StepPlan:
    fanout: int
    output_tokens: list[int]
    tool_s: float
    append_tokens: int


def plan_task(persona: AgentSwarmPersona, rng: random.Random) -> list[StepPlan]:
    """Every random choice of a task, drawn up front (so the ideal time and the run agree)."""
    steps = persona.steps.sample_int(rng, lowest=1)
    plan = []
    for _ in range(steps):
        k = persona.fanout.sample_int(rng, lowest=1)
        plan.append(
            StepPlan(
                k,
                [persona.output_tokens.sample_int(rng, lowest=1) for _ in range(k)],
                persona.tool_time_s.sample(rng),
                persona.append_tokens.sample_int(rng, lowest=1),
            )
        )
    return plan


def ideal_s(plan: list[StepPlan]) -> float:
    """Makespan on an idle stack: per step the slowest branch, then the tool time (not after the last)."""
    total = 0.0
    for i, step in enumerate(plan):
        total += IDEAL_TTFT_S + max(step.output_tokens) * IDEAL_TPOT_S
        if i < len(plan) - 1:
            total += step.tool_s
    return total


def target_agents(ctx: WorkerContext, persona: AgentSwarmPersona) -> int:
    """Agents that should be active now in the whole swarm (population × the phase's agents scale)."""
    idx = phase_index(ctx.scenario.phases, ctx.now_s())
    if idx is None:
        return 0
    return round(persona.agents * agents_scale(ctx.scenario.phases[idx]))


def run_swarm(ctx: WorkerContext, persona: AgentSwarmPersona, group: Group) -> None:
    """Drive this process's share of a swarm."""
    if persona.start == "arrivals":
        _arrivals(ctx, persona, group)
        return
    ramp = 0.0 if persona.start == "stampede" else persona.ramp_s
    mine_ids = [j for j in range(persona.agents) if mine(j, ctx.worker_index, ctx.workers)]
    for j in mine_ids:
        start = ramp * j / max(1, persona.agents)
        group.spawn(_agent_loop, ctx, persona, j, start)


def _agent_loop(ctx: WorkerContext, persona: AgentSwarmPersona, agent: int, start_s: float) -> None:
    sleep_until(ctx, start_s)
    rng = ctx.rng(persona.name, "agent", agent)
    pools = Pools(max_idle=1)
    tenants = ctx.scenario.tier(persona.tier).tenant_ids
    tenant = tenants[agent % len(tenants)]
    task_no = 0
    try:
        while not ctx.stopping and ctx.now_s() < ctx.end_s:
            if agent >= target_agents(ctx, persona):
                gevent.sleep(0.25)  # this agent is parked in the current phase
                continue
            task_no += 1
            outcome = _task(
                ctx,
                persona,
                pools,
                tenant,
                f"{persona.name}-a{agent}-k{task_no}",
                ctx.rng(persona.name, "agent", agent, task_no),
                ctx.now_ns(),
            )
            idle = persona.idle_between_tasks_s.sample(rng)
            if outcome == "failed":
                idle += persona.after_failure_s.sample(rng)  # harnesses back off; no hot retry loop
            if idle > 0:
                sleep_until(ctx, ctx.now_s() + idle)
    finally:
        pools.close()


def _arrivals(ctx: WorkerContext, persona: AgentSwarmPersona, group: Group) -> None:
    rng = ctx.rng(persona.name, ctx.worker_index, "arrivals")
    rate = worker_share(persona.task_rate or 1.0, ctx.workers)
    slots = worker_slots(persona.agents, ctx.workers, ctx.worker_index)
    tenants = ctx.scenario.tier(persona.tier).tenant_ids
    slots_ = Slots(slots)
    for instance, t in open_loop(ctx, rate, lambda: unit_work_const(rng), persona.name):
        task_rng = ctx.rng(persona.name, ctx.worker_index, instance)
        tenant = task_rng.choice(tenants)
        task_id = f"{persona.name}-w{ctx.worker_index}-t{instance}"
        if slots_.full():
            not_sent(
                ctx,
                Logical(
                    persona.tier, tenant, persona.name, prompts.Conversation(), 0, int(t * 1e9), task_id=task_id, step=1
                ),
            )
            continue
        slots_.spawn(group, _pooled_task, ctx, persona, tenant, task_id, task_rng, int(t * 1e9))


def unit_work_const(rng: random.Random) -> float:
    """Task arrivals are Poisson."""
    return rng.expovariate(1.0)


def _pooled_task(
    ctx: WorkerContext, persona: AgentSwarmPersona, tenant: str, task_id: str, rng: random.Random, intended_ns: int
) -> None:
    pools = Pools(max_idle=1)
    try:
        _task(ctx, persona, pools, tenant, task_id, rng, intended_ns)
    finally:
        pools.close()


def _task(
    ctx: WorkerContext,
    persona: AgentSwarmPersona,
    pools: Pools,
    tenant: str,
    task_id: str,
    rng: random.Random,
    intended_ns: int,
) -> str:
    plan = plan_task(persona, rng)
    task = new_task(ctx, persona.name, persona.tier, tenant)
    task.task_id = task_id
    task.start_ns = intended_ns
    ideal = ideal_s(plan)
    task.ideal_ns = int(ideal * 1e9)
    deadline_s = persona.deadline_s if persona.deadline_s is not None else persona.deadline_factor * ideal
    task.deadline_ns = intended_ns + int(deadline_s * 1e9)
    shared = (
        prompts.text(f"shared:{persona.name}", persona.shared_context_tokens) if persona.shared_context_tokens else ""
    )
    conv = prompts.Conversation(shared)
    conv.append("user", prompts.text(f"{task_id}:ctx", persona.task_context_tokens.sample_int(rng, lowest=1)))
    pools.max_idle = max(pools.max_idle, max(s.fanout for s in plan))
    outcome = "completed"
    compactions = 0
    try:
        for step_no, step in enumerate(plan, start=1):
            if ctx.now_ns() > task.deadline_ns:
                outcome = "deadline_missed"
                break
            notes = [prompts.text(f"{task_id}:s{step_no}:b{i}", BRANCH_NOTE_TOKENS) for i in range(step.fanout)]
            step_intended = ctx.now_ns() if step_no > 1 else intended_ns
            records = _fan_out(ctx, persona, pools, conv, notes, step, tenant, task_id, step_no, step_intended)
            task.steps += 1
            served = [i for i, r in enumerate(records) if count_call(task, r)]
            if not served:
                outcome = "failed"
                break
            if step_no == len(plan):
                break
            # continue from the first served branch: its exact prompt and output become the prefix
            b = served[0]
            produced = records[b].output_tokens or records[b].tokens or step.output_tokens[b]
            conv.append("user", notes[b])
            conv.append("assistant", prompts.text(f"{task_id}:s{step_no}:out{b}", produced))
            sleep_until(ctx, ctx.now_s() + step.tool_s)  # tools run: the stack sees nothing from us
            conv.append("user", prompts.text(f"{task_id}:s{step_no}:tool", step.append_tokens))
            if conv.tokens > persona.context_cap_tokens:
                compactions += 1
                keep = int(persona.context_cap_tokens * persona.compact_to)
                conv = prompts.Conversation(shared)
                conv.append("user", prompts.text(f"{task_id}:compact{compactions}", keep))
        if outcome == "completed" and ctx.now_ns() > task.deadline_ns:
            outcome = "deadline_missed"
    except (Cancelled, gevent.GreenletExit):
        outcome = "cancelled"
        raise
    finally:
        close_task(ctx, task, outcome)
    return outcome


def _fan_out(
    ctx: WorkerContext,
    persona: AgentSwarmPersona,
    pools: Pools,
    conv: prompts.Conversation,
    notes: list[str],
    step: StepPlan,
    tenant: str,
    task_id: str,
    step_no: int,
    intended_ns: int,
) -> list[RequestRecord]:
    reqs = [
        Logical(
            persona.tier,
            tenant,
            persona.name,
            conv.with_user(notes[i]),
            step.output_tokens[i],
            intended_ns,
            task_id=task_id,
            step=step_no,
            fanout_index=i,
            tools=persona.tool_schemas,
        )
        for i in range(step.fanout)
    ]
    if len(reqs) == 1:
        return [send_logical(ctx, pools, reqs[0])]
    calls = Group()
    glets = [calls.spawn(send_logical, ctx, pools, r) for r in reqs]
    try:
        calls.join(raise_error=True)
    except BaseException:
        calls.kill(exception=Cancelled, block=True, timeout=5)
        raise
    return [g.value for g in glets]

