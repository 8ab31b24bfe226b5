"""Agent-trace replay: recorded sessions as trees — a call after its parent's answer and the tool time, sub-agents
at once, each prompt its agent's previous prompt and answer plus the new text (so the stack's prefix cache works)."""

from __future__ import annotations

from typing import Any

from rushhour.loadgen.agent_traces import AgentCall, AgentRun, AgentSession, read_agent_trace
from rushhour.loadgen.flow.protocol import NS, Flow, Fork, Host, Logical, Spawn, Wait, counted, end_ns, wait_s
from rushhour.loadgen.flow.send import send_logical
from rushhour.loadgen.schedule import mine, worker_slots
from rushhour.loadgen.workload import count_call
from rushhour.records.record import TaskRecord
from rushhour.scenarios.distributions import resolve_trace_path
from rushhour.scenarios.model import AgentTracePersona

MAIN = "main"


def session_plan(host: Host, persona: AgentTracePersona) -> list[tuple[float, AgentSession]]:
    """(seconds from the run's start, session): the trace's first sessions, one every ``session_gap_s`` (scaled),
    those that start before the load ends."""
    sessions = read_agent_trace(resolve_trace_path(persona.trace), persona.format, persona.sessions)
    gap = persona.session_gap_s / persona.time_scale
    return [(n * gap, s) for n, s in enumerate(sessions) if n * gap < host.scenario.duration_s]


def run_agent_trace(host: Host, persona: AgentTracePersona) -> Flow:
    """This process's sessions (every ``workers``-th), each started at its time while a session slot is free."""
    plan = session_plan(host, persona)
    slots = worker_slots(persona.max_sessions_in_flight, host.workers, host.worker_index)
    tenants = host.scenario.tier(persona.tier).tenant_ids
    active = [0]
    try:
        for n, (at, session) in enumerate(plan):
            if not mine(n, host.worker_index, host.workers):
                continue
            yield Wait(int(at * NS))
            if host.stopping:
                return
            if host.behind(persona.name, at):
                continue  # hopelessly late: counted in the shortfall, not sent
            tenant = tenants[n % len(tenants)]
            sid = f"{persona.name}-{session.session_id}"
            if active[0] >= slots:
                host.not_sent(Logical(persona.tier, tenant, persona.name, host.conversation(), 0, int(at * NS),
                                      session_id=sid, task_id=sid, step=1))
                continue
            active[0] += 1
            yield Spawn(counted(replay_session(host, persona, session, n, sid, int(at * NS)), active))
    finally:
        host.flush_shortfall(persona.name)


def replay_session(host: Host, persona: AgentTracePersona, session: AgentSession, n: int, sid: str,
                   intended_ns: int) -> Flow:
    """Session number ``n`` as one task (the audit's task view: completion, makespan); returns its outcome."""
    task = host.new_task(persona.name, persona.tier, _tenant(host, persona.tier, n), sid, intended_ns, session_id=sid)
    outcome = "cancelled"
    try:
        outcome = yield from _run(host, persona, task, n, sid, session.main, None, 0, intended_ns)
    finally:
        host.close_task(task, outcome)
    return outcome


def _tenant(host: Host, tier: str, n: int) -> str:
    """Session ``n``'s tenant in ``tier`` (its sub-agents' tier may be another one)."""
    tenants = host.scenario.tier(tier).tenant_ids
    return tenants[n % len(tenants)]


def _wait(persona: AgentTracePersona, gap_s: float) -> float:
    """A recorded gap in this run's seconds: scaled, and capped by ``max_gap_s``."""
    scaled = gap_s / persona.time_scale
    return scaled if persona.max_gap_s is None else min(scaled, persona.max_gap_s)


def _prompt(host: Host, persona: AgentTracePersona, sid: str, call: AgentCall, prev: tuple[Any, AgentCall] | None
            ) -> Any:
    """The call's prompt: its agent's previous prompt, that answer and the new text when the context carried over;
    else a fresh context opening with the session's shared text for the tokens it shares."""
    tokens = min(call.prompt_tokens, persona.max_prompt_tokens)
    if prev is not None and call.carries:
        conv = host.copy(prev[0])
        parent = prev[1]
        conv.append("assistant", host.text(f"{sid}:c{parent.index}:out",
                                           max(1, min(parent.output_tokens, persona.max_output_tokens))))
        if conv.tokens < tokens:
            return conv.with_user(host.text(f"{sid}:c{call.index}", tokens - conv.tokens))
    # every agent of the session opens with the same text: a shared prefix is the same bytes
    shared = min(call.prefix_tokens, tokens - 1)
    conv = host.conversation(host.text(f"{sid}:shared", shared) if shared > 0 else "")
    return conv.with_user(host.text(f"{sid}:c{call.index}", tokens - max(shared, 0)))


def _run(host: Host, persona: AgentTracePersona, task: TaskRecord, n: int, sid: str, run: AgentRun,
         spawner: Logical | None, branch: int, first_ns: int) -> Flow:
    """One agent's calls in order; a call that spawned sub-agents waits for them all before its agent goes on.

    A sub-agent's calls carry the spawning call's logical id (``parent_id``): the report's agents section counts
    spawns and sub-agent requests from it. Returns "completed", "failed" or "cancelled".
    """
    tier = persona.tier if run.agent_type == MAIN else persona.tier_of(run.agent_type)
    tenant = _tenant(host, tier, n)
    prev: tuple[Any, AgentCall] | None = None
    for step, call in enumerate(run.calls, start=1):
        if spawner is not None or step > 1:
            gap = _wait(persona, call.gap_s)
            if gap > 0:
                yield wait_s(host, gap)  # the tools run: the stack sees nothing from this agent meanwhile
            if host.stopping or host.now_ns() >= end_ns(host):
                return "cancelled"  # the load ended before this call: not sent, like a chat user's next turn
        prompt = _prompt(host, persona, sid, call, prev)
        req = Logical(tier, tenant, persona.name, prompt, max(1, min(call.output_tokens, persona.max_output_tokens)),
                      first_ns if spawner is None and step == 1 else host.now_ns(), session_id=sid, task_id=sid,
                      step=step, fanout_index=branch, parent_id=spawner.logical_id if spawner is not None else "")
        record = yield from send_logical(host, req)
        task.steps += 1
        if not count_call(task, record):
            return "failed"
        if call.spawns:
            outcomes: list[str] = []
            for lo in range(0, len(call.spawns), persona.max_fan_out):  # at most max_fan_out at once
                outcomes += yield Fork([_run(host, persona, task, n, sid, sub, req, lo + j, 0)
                                        for j, sub in enumerate(call.spawns[lo:lo + persona.max_fan_out])],
                                       own_pools=True)
            bad = next((o for o in outcomes if o != "completed"), None)
            if bad is not None:
                return bad
        prev = (prompt, call)
    return "completed"
