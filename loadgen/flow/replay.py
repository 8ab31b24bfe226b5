"""Trace replay: each row of a real trace becomes one request at its (scaled) timestamp."""

from __future__ import annotations

from rushhour.loadgen.flow.protocol import NS, Flow, Host, Logical, Spawn, Wait, counted
from rushhour.loadgen.flow.send import send_logical
from rushhour.loadgen.schedule import mine, worker_slots
from rushhour.loadgen.traces import TraceRow, read_trace, schedule
from rushhour.loadgen.workload import prompt_for
from rushhour.scenarios.distributions import resolve_trace_path
from rushhour.scenarios.model import TraceReplayPersona


def replay_plan(host: Host, persona: TraceReplayPersona) -> list[tuple[float, TraceRow]]:
    """The trace's rows at their (scaled) times, up to the end of the schedule."""
    rows = read_trace(resolve_trace_path(persona.trace), persona.format)
    return schedule(rows, time_scale=persona.time_scale, start_s=persona.start_s, limit=persona.limit,
                    end_s=host.scenario.duration_s)


def replay_slots(host: Host, persona: TraceReplayPersona) -> int:
    """Requests of this persona in flight at once in this process."""
    return worker_slots(persona.max_in_flight, host.workers, host.worker_index)


def run_replay(host: Host, persona: TraceReplayPersona, plan: list[tuple[float, TraceRow]] | None = None,
               start_s: float = 0.0, *, whole: bool = False) -> Flow:
    """This process's rows (every ``workers``-th), each sent at ``start_s`` + its time, up to the slots;
    ``whole``: every row and the persona's whole ``max_in_flight`` (a Locust ``ReplayUser`` plays the trace alone)."""
    plan = replay_plan(host, persona) if plan is None else plan
    slots = persona.max_in_flight if whole else replay_slots(host, persona)
    tenants = host.scenario.tier(persona.tier).tenant_ids
    active = [0]
    try:
        for n, (when, row) in enumerate(plan):
            if not whole and not mine(n, host.worker_index, host.workers):
                continue
            at = start_s + when
            yield Wait(int(at * NS))
            if host.stopping:
                return
            if host.behind(persona.name, at):
                continue  # hopelessly late: counted in the shortfall, not sent
            tenant = tenants[row.index % len(tenants)]
            max_tokens = max(1, min(row.output_tokens, persona.max_output_tokens))
            session = f"{persona.name}-r{row.index}"
            if active[0] >= slots:
                host.not_sent(Logical(persona.tier, tenant, persona.name, host.conversation(), max_tokens,
                                      int(at * NS), session_id=session))
                continue
            req = Logical(persona.tier, tenant, persona.name, host.from_prompt(prompt_for(persona, row)), max_tokens,
                          int(at * NS), session_id=session)
            active[0] += 1
            yield Spawn(counted(send_logical(host, req), active), pools=None)
    finally:
        host.flush_shortfall(persona.name)
