"""Agent swarms: each task loops fan-out → tool quiet → return with a longer, byte-identical prefix."""

from __future__ import annotations

import random
from typing import Any

from rushhour.loadgen.datasets import load_dataset
from rushhour.loadgen.flow.arrivals import open_loop
from rushhour.loadgen.flow.protocol import NS, Flow, Fork, Host, Logical, Spawn, Wait, counted, end_ns, wait_s
from rushhour.loadgen.flow.send import send_logical
from rushhour.loadgen.schedule import agents_scale, mine, phase_index, worker_share, worker_slots
from rushhour.loadgen.workload import StepPlan, count_call, ideal_s, plan_task
from rushhour.records.record import RequestRecord, TaskRecord
from rushhour.scenarios.model import AgentSwarmPersona

BRANCH_NOTE_TOKENS = 16
PARK_S = 0.25  # a parked agent looks again this often


def target_agents(host: Host, persona: AgentSwarmPersona) -> int:
    """Agents that should be active now in the whole swarm (population × the phase's agents scale)."""
    idx = phase_index(host.scenario.phases, host.now_ns() / NS)
    if idx is None:
        return 0
    return round(persona.agents * agents_scale(host.scenario.phases[idx]))


def run_swarm(host: Host, persona: AgentSwarmPersona) -> Flow:
    """Drive this process's share of a swarm: a population (ramped, or all at t0) or open-loop arrivals."""
    if persona.start == "arrivals":
        yield from _arrivals(host, persona)
        return
    ramp = 0.0 if persona.start == "stampede" else persona.ramp_s
    for j in range(persona.agents):
        if mine(j, host.worker_index, host.workers):
            yield Spawn(agent_loop(host, persona, j, ramp * j / max(1, persona.agents)))


def agent_loop(host: Host, persona: AgentSwarmPersona, agent: int, start_s: float) -> Flow:
    """One agent of a population: tasks one after another, idle between them, parked outside its phase."""
    yield Wait(int(start_s * NS))
    rng = host.rng(persona.name, "agent", agent)
    tenants = host.scenario.tier(persona.tier).tenant_ids
    tenant = tenants[agent % len(tenants)]
    task_no = 0
    while not host.stopping and host.now_ns() < end_ns(host):
        if agent >= target_agents(host, persona):
            yield wait_s(host, PARK_S)  # this agent is parked in the current phase
            continue
        task_no += 1
        outcome = yield from task(host, persona, tenant, f"{persona.name}-a{agent}-k{task_no}",
                                  host.rng(persona.name, "agent", agent, task_no), host.now_ns())
        idle = persona.idle_between_tasks_s.sample(rng)
        if outcome == "failed":
            idle += persona.after_failure_s.sample(rng)  # harnesses back off; no hot retry loop
        if idle > 0:
            yield wait_s(host, idle)


def _arrivals(host: Host, persona: AgentSwarmPersona) -> Flow:
    rng = host.rng(persona.name, host.worker_index, "arrivals")
    rate = worker_share(persona.task_rate or 1.0, host.workers)
    slots = worker_slots(persona.agents, host.workers, host.worker_index)
    tenants = host.scenario.tier(persona.tier).tenant_ids
    active = [0]
    try:
        # task arrivals are Poisson
        for instance, t in open_loop(host, rate, lambda: rng.expovariate(1.0), persona.name):
            yield Wait(int(t * NS))
            if host.stopping:
                return
            if host.behind(persona.name, t):
                continue
            task_rng = host.rng(persona.name, host.worker_index, instance)
            tenant = task_rng.choice(tenants)
            task_id = f"{persona.name}-w{host.worker_index}-t{instance}"
            if active[0] >= slots:
                host.not_sent(Logical(persona.tier, tenant, persona.name, host.conversation(), 0, int(t * NS),
                                      task_id=task_id, step=1))
                continue
            active[0] += 1
            yield Spawn(counted(task(host, persona, tenant, task_id, task_rng, int(t * NS)), active))
    finally:
        host.flush_shortfall(persona.name)


def task(host: Host, persona: AgentSwarmPersona, tenant: str, task_id: str, rng: random.Random,
         intended_ns: int) -> Flow:
    """One task: its plan's steps (fan-out, tools, sub-agents), deadline and compaction; returns its outcome."""
    plan = plan_task(persona, rng)
    t = host.new_task(persona.name, persona.tier, tenant, task_id, intended_ns)
    ideal = ideal_s(plan)
    t.ideal_ns = int(ideal * NS)
    deadline_s = persona.deadline_s if persona.deadline_s is not None else persona.deadline_factor * ideal
    t.deadline_ns = intended_ns + int(deadline_s * NS)
    shared = host.text(f"shared:{persona.name}", persona.shared_context_tokens) if persona.shared_context_tokens else ""
    conv = host.conversation(shared)
    conv.append("user", _task_context(host, persona, task_id, rng))
    outcome = "completed"
    compactions = 0
    try:
        for step_no, step in enumerate(plan, start=1):
            if host.now_ns() > t.deadline_ns:
                outcome = "deadline_missed"
                break
            if step_no > 1 and (host.stopping or host.now_ns() >= end_ns(host)):
                # the load ended before the task's next step: like a chat user's next turn, it is not sent
                # (a step started in the drain is cut at the hard stop and would count as not served)
                outcome = "cancelled"
                break
            notes = [host.text(f"{task_id}:s{step_no}:b{i}", BRANCH_NOTE_TOKENS) for i in range(step.fanout)]
            step_intended = host.now_ns() if step_no > 1 else intended_ns
            reqs = [Logical(persona.tier, tenant, persona.name, conv.with_user(notes[i]), step.output_tokens[i],
                            step_intended, task_id=task_id, step=step_no, fanout_index=i, tools=persona.tool_schemas)
                    for i in range(step.fanout)]
            records = yield from _fan_out(host, reqs)
            t.steps += 1
            served = [i for i, r in enumerate(records) if count_call(t, r)]
            if not served:
                outcome = "failed"
                break
            if step_no == len(plan):
                break
            # continue from the first served branch: its exact prompt and output become the prefix
            b = served[0]
            key = f"{task_id}:s{step_no}"
            wait = (_spawn(host, persona, t, tenant, shared, reqs[b].logical_id, step.subagents, key)
                    if step.subagents else _tools(host, step.tool_s))
            sub_outcome = yield from _carry(host, conv, notes[b], reqs[b], records[b], step, b, key, wait)
            if sub_outcome != "completed":
                outcome = sub_outcome
                break
            if conv.tokens > persona.context_cap_tokens:
                compactions += 1
                keep = int(persona.context_cap_tokens * persona.compact_to)
                conv = host.conversation(shared)
                conv.append("user", host.text(f"{task_id}:compact{compactions}", keep))
        if outcome == "completed" and host.now_ns() > t.deadline_ns:
            outcome = "deadline_missed"
    except BaseException:  # the driver's cancel (the run's hard stop, a stopped user), or a dropped task
        outcome = "cancelled"
        raise
    finally:
        host.close_task(t, outcome)
    return outcome


def _task_context(host: Host, persona: AgentSwarmPersona, task_id: str, rng: random.Random) -> Any:
    """The task's own context after the shared one: synthetic text, or a sampled conversation's first turn."""
    spec = persona.dataset
    if spec is None:
        return host.text(f"{task_id}:ctx", persona.task_context_tokens.sample_int(rng, lowest=1))
    dialog = host.rng(persona.name, task_id, "dataset").choice(load_dataset(spec.path, spec.format, spec.limit))
    return "\n\n".join(part for part in (dialog.system, dialog.turns[0].user) if part)


def _tools(host: Host, tool_s: float) -> Flow:
    """Tools run: the stack sees nothing from this agent meanwhile."""
    yield wait_s(host, tool_s)
    return "completed"


def _carry(host: Host, conv: Any, note: Any, req: Logical, record: RequestRecord, step: StepPlan, branch: int,
           key: str, wait: Flow) -> Flow:
    """Append the served branch's prompt and answer, wait for the tools, append their result.

    When the answer called a tool, the next prompt carries that actual call and a ``tool`` message of
    the scenario's size; a text answer (a stack that calls no tools) becomes text of the length it
    produced, then the result as a user message. Returns how the wait ended (sub-agents can fail).
    """
    conv.append("user", note)
    result = host.text(f"{key}:tool", step.append_tokens)
    # a call cut short (max_tokens, a broken stream) cannot be replayed: the step counts as text
    calls = [c for c in req.reply_calls if c.complete]
    if calls:
        conv.append_call(calls[0])
        outcome = yield from wait
        conv.append_result(calls[0], result)
        return outcome
    produced = record.output_tokens or record.tokens or step.output_tokens[branch]
    conv.append("assistant", host.text(f"{key}:out{branch}", produced))
    outcome = yield from wait
    conv.append("user", result)
    return outcome


def _spawn(host: Host, persona: AgentSwarmPersona, task: TaskRecord, tenant: str, shared: Any, parent_id: str,
           plans: list[list[StepPlan]], key: str) -> Flow:
    """The call spawned sub-agents: run them all at once and wait; "completed" only when every one did.

    They share the swarm's context and the spawn's brief (a common prefix), carry the parent's task id
    (the audit's task view counts their calls with the task's) and the spawning call's logical id.
    """
    sub = persona.subagents
    assert sub is not None
    base = host.conversation(shared)
    if sub.prefix_tokens:
        base.append("user", host.text(f"{key}:brief", sub.prefix_tokens))
    outcomes = yield Fork([_subagent(host, persona, task, tenant, base, plan, parent_id, j, f"{key}:sub{j}")
                           for j, plan in enumerate(plans)], own_pools=True)
    return next((o for o in outcomes if o != "completed"), "completed")


def _subagent(host: Host, persona: AgentSwarmPersona, task: TaskRecord, tenant: str, base: Any,
              plan: list[StepPlan], parent_id: str, index: int, key: str) -> Flow:
    """One sub-agent: single-call steps from the shared brief, carrying tool calls like its parent."""
    conv = host.copy(base)
    for step_no, step in enumerate(plan, start=1):
        if host.stopping or host.now_ns() > (task.deadline_ns or 0):
            return "deadline_missed" if not host.stopping else "cancelled"
        note = host.text(f"{key}:s{step_no}", BRANCH_NOTE_TOKENS)
        req = Logical(persona.tier, tenant, persona.name, conv.with_user(note), step.output_tokens[0],
                      host.now_ns(), task_id=task.task_id, step=step_no, fanout_index=index,
                      tools=persona.tool_schemas, parent_id=parent_id)
        record = yield from send_logical(host, req)
        if not count_call(task, record):
            return "failed"
        if step_no < len(plan):
            yield from _carry(host, conv, note, req, record, step, 0, f"{key}:s{step_no}", _tools(host, step.tool_s))
    return "completed"


def _fan_out(host: Host, reqs: list[Logical]) -> Flow:
    """One step's branches, sent at once; their records."""
    if len(reqs) == 1:
        return [(yield from send_logical(host, reqs[0]))]
    records: list[RequestRecord] = yield Fork([send_logical(host, r) for r in reqs])
    return records
