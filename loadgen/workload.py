"""Pure workload plans and bookkeeping shared by the Locust personas and the simulator (sim/)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from rushhour.loadgen import prompts
from rushhour.loadgen.traces import MOONCAKE_BLOCK_TOKENS, TraceRow
from rushhour.records.record import RequestRecord, TaskRecord
from rushhour.scenarios.model import AgentSwarmPersona, TraceReplayPersona

# Ideal-time estimate for a deadline factor: a call on an idle stack (assumed, documented).
IDEAL_TTFT_S = 0.2
IDEAL_TPOT_S = 0.02


@dataclass(slots=True)
class StepPlan:
    fanout: int
    output_tokens: list[int]
    tool_s: float
    append_tokens: int
    # sub-agents this step's call spawns (each its own plan of single-call steps); the parent waits for
    # them all instead of a tool's time
    subagents: list[list[StepPlan]] = field(default_factory=list)


# persona id -> (the persona, kept alive so its id is not reused; its plan's samplers)
_PLAN_SAMPLERS: dict[int, tuple[AgentSwarmPersona, Callable[[random.Random], int], Callable[[random.Random], int],
                                Callable[[random.Random], int], Callable[[random.Random], float],
                                Callable[[random.Random], int]]] = {}


def plan_task(persona: AgentSwarmPersona, rng: random.Random) -> list[StepPlan]:
    """Every random choice of a task, drawn up front (so the ideal time and the run agree)."""
    samplers = _PLAN_SAMPLERS.get(id(persona))
    if samplers is None:  # once per persona: the same draws, in the same order, without the models' lookups
        samplers = _PLAN_SAMPLERS[id(persona)] = (
            persona, persona.steps.int_sampler(1), persona.fanout.int_sampler(1),
            persona.output_tokens.int_sampler(1), persona.tool_time_s.sampler(), persona.append_tokens.int_sampler(1))
    _, n_steps, fanout, output, tool_s, append = samplers
    steps = n_steps(rng)
    plan = []
    for i in range(steps):
        k = fanout(rng)
        plan.append(StepPlan(k, [output(rng) for _ in range(k)], tool_s(rng), append(rng)))
        sub = persona.subagents
        # drawn only when the persona has sub-agents: every other scenario keeps its samples
        if sub is not None and i < steps - 1 and rng.random() < sub.probability:
            plan[-1].subagents = [
                [
                    StepPlan(
                        1,
                        [persona.output_tokens.sample_int(rng, lowest=1)],
                        persona.tool_time_s.sample(rng),
                        persona.append_tokens.sample_int(rng, lowest=1),
                    )
                    for _ in range(sub.steps.sample_int(rng, lowest=1))
                ]
                for _ in range(sub.fan_out.sample_int(rng, lowest=1))
            ]
    return plan


def ideal_s(plan: list[StepPlan]) -> float:
    """Makespan on an idle stack: per step the slowest branch, then the tool time or the slowest
    sub-agent (not after the last step)."""
    total = 0.0
    for i, step in enumerate(plan):
        total += IDEAL_TTFT_S + max(step.output_tokens) * IDEAL_TPOT_S
        if i < len(plan) - 1:
            total += max(ideal_s(sub) for sub in step.subagents) if step.subagents else step.tool_s
    return total


def is_served(record: RequestRecord) -> bool:
    """A complete 2xx response with no error of any kind."""
    return (
        200 <= record.status < 300
        and record.complete
        and not record.in_band_error
        and not record.client_timeout
        and not record.transport_error
        and not record.cancelled
        and not record.not_sent
    )


def count_call(task: TaskRecord, record: RequestRecord) -> bool:
    """Book one logical call on a task; True when it was served."""
    task.calls += 1
    ok = is_served(record)
    if not ok:
        task.calls_failed += 1
        if task.first_failure is None:
            task.first_failure = describe(record)
    return ok


def describe(record: RequestRecord) -> str:
    """A task's first failure in a few words (cancelled, timeout, ``503 queue_full`` …)."""
    if record.cancelled:
        return "cancelled"
    if record.abandoned:
        return "abandoned"
    if record.client_timeout:
        return "timeout"
    if record.transport_error or record.status == 0:
        return f"transport {record.reason or record.error or ''}".strip()
    if record.in_band_error:
        return f"in_band {record.reason or ''}".strip()
    if 200 <= record.status < 300:
        return "incomplete"
    return f"{record.status} {record.reason or ''}".strip()


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
