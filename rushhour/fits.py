"""Does a scenario's traffic fit the context of the embedded testbed it starts? (`scenario check`, `run --dry-run`)

A scenario's ``url: testbed`` starts the testbed its ``target.testbed`` describes — by default one ``tiny``
replica with a 4,096-token context, not the 2 × H100 of ``rushhour serve`` — and the testbed refuses, with 400
"maximum context length", any request whose prompt and ``max_tokens`` together exceed it. A replayed trace or a
dataset brings its own sizes, so this counts the rows and conversations the run would send that cannot fit.
Sizes are counted as the load generator sizes prompts (bytes / 4 without a tokenizer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rushhour.loadgen.agent_traces import read_agent_trace
from rushhour.loadgen.datasets import load_dataset
from rushhour.loadgen.prompts import count as count_tokens
from rushhour.loadgen.testbed_proc import testbed_config
from rushhour.loadgen.traces import read_trace, schedule
from rushhour.scenarios.distributions import resolve_trace_path
from rushhour.scenarios.kinds import every_kind
from rushhour.scenarios.model import (
    AgentSwarmPersona,
    AgentTracePersona,
    ChatPersona,
    Dataset,
    Scenario,
    TraceReplayPersona,
)
from rushhour.testbed.config import ConfigError, TestbedConfig, from_dict
from rushhour.testbed.presets import get_preset

BIGGER = "h100-llama8b"  # the preset to suggest: a 430,000-token context


@dataclass(frozen=True)
class TestbedShape:
    """The primary testbed a scenario starts: its preset, replicas, sequences and context (tokens per request)."""

    preset: str
    replicas: int
    max_num_seqs: int
    context: int

    __test__ = False  # not a pytest class

    def describe(self) -> str:
        return (f"the embedded testbed: preset {self.preset} × {self.replicas} replica(s), {self.max_num_seqs} "
                f"sequences and a {self.context:,}-token context each (`rushhour serve` alone: h100-llama8b × 2)")


def testbed_shape(scenario: Scenario) -> TestbedShape | None:
    """The primary testbed's shape, None when the scenario targets no testbed (or its config is broken:
    that is reported on its own)."""
    if not scenario.target.is_testbed:
        return None
    try:
        cfg = from_dict(TestbedConfig, testbed_config(scenario, None, with_faults=False)).validate()
    except (ConfigError, ValueError, TypeError):
        return None
    preset = get_preset(cfg.preset)
    return TestbedShape(cfg.preset, cfg.replicas, cfg.max_num_seqs or preset.max_num_seqs,
                        cfg.kv_capacity_tokens or preset.kv_capacity_tokens)


def _advice(shape: TestbedShape) -> str:
    return (f"the testbed refuses them with 400; give target.testbed.preset: {BIGGER} "
            f"(or lower the sizes)" if shape.preset != BIGGER else "the testbed refuses them with 400")


def _trace_over(persona: TraceReplayPersona, scenario: Scenario, shape: TestbedShape) -> str | None:
    rows = read_trace(resolve_trace_path(persona.trace), persona.format)
    sent = schedule(rows, time_scale=persona.time_scale, start_s=persona.start_s, limit=persona.limit,
                    end_s=scenario.duration_s)
    over = sum(1 for _, row in sent
               if min(row.prompt_tokens, persona.max_prompt_tokens)
               + max(1, min(row.output_tokens, persona.max_output_tokens)) > shape.context)
    if not over:
        return None
    trace = Path(persona.trace).name
    return (f"persona {persona.name!r}: {over:,} of the {len(sent):,} rows of trace {trace!r} the run sends "
            f"exceed the testbed's {shape.context:,}-token context (prompt + max_tokens; preset {shape.preset}): "
            f"{_advice(shape)}")


def _agent_trace_over(persona: AgentTracePersona, scenario: Scenario, shape: TestbedShape) -> str | None:
    """Calls of the replayed sessions (sub-agents' included) whose prompt and max_tokens exceed the context."""
    sessions = read_agent_trace(resolve_trace_path(persona.trace), persona.format, persona.sessions)
    calls = [c for s in sessions for run in s.runs() for c in run.calls]
    over = sum(1 for c in calls if min(c.prompt_tokens, persona.max_prompt_tokens)
               + max(1, min(c.output_tokens, persona.max_output_tokens)) > shape.context)
    if not over:
        return None
    return (f"persona {persona.name!r}: {over:,} of the {len(calls):,} calls of agent trace "
            f"{Path(persona.trace).name!r} exceed the testbed's {shape.context:,}-token context (prompt + "
            f"max_tokens; preset {shape.preset}): {_advice(shape)}")


def _chat_over(persona: ChatPersona, scenario: Scenario, shape: TestbedShape) -> str | None:
    """A chat's dataset conversations (each up to max_turns) that cannot fit; nothing without a dataset."""
    if persona.dataset is None:
        return None
    return _dataset_over(persona.name, persona.dataset, persona.system_prompt_tokens, persona.dataset.max_turns,
                         shape)


def _swarm_over(persona: AgentSwarmPersona, scenario: Scenario, shape: TestbedShape) -> str | None:
    """A swarm's dataset tasks (each a conversation's first turn) that cannot fit, else its shared context alone."""
    if persona.dataset is None:
        return _shared_over(persona, shape)
    return _dataset_over(persona.name, persona.dataset, persona.shared_context_tokens, 1, shape)


def _dataset_over(name: str, spec: Dataset, shared: int, max_turns: int | None, shape: TestbedShape
                  ) -> str | None:
    dialogs = load_dataset(spec.path, spec.format, spec.limit)
    over = 0
    for dialog in dialogs:
        turns = dialog.turns[: max_turns or len(dialog.turns)]
        if not turns:
            continue
        prompt = shared + (count_tokens(dialog.system) if dialog.system else 0)
        for turn in turns[:-1]:  # a chat's last turn resends every earlier one: its largest request
            prompt += count_tokens(turn.user) + (count_tokens(turn.reply) if turn.reply else 0)
        last = turns[-1]
        prompt += count_tokens(last.user)
        answer = count_tokens(last.reply) if last.reply and spec.output_tokens == "dataset" else 1
        if prompt + answer > shape.context:
            over += 1
    if not over:
        return None
    return (f"persona {name!r}: {over:,} of the {len(dialogs):,} conversations of dataset {spec.path!r} "
            f"exceed the testbed's {shape.context:,}-token context (preset {shape.preset}): {_advice(shape)}")


def _shared_over(persona: AgentSwarmPersona, shape: TestbedShape) -> str | None:
    """Every call of a swarm carries its shared context: over the context, not one call can be served."""
    if persona.shared_context_tokens < shape.context:
        return None
    return (f"persona {persona.name!r}: every call carries shared_context_tokens {persona.shared_context_tokens:,}, "
            f"over the testbed's {shape.context:,}-token context (preset {shape.preset}): {_advice(shape)}")


# each persona kind's size check (persona, scenario, testbed shape) → one warning line or None, by its ``kind``
OVER: Mapping[str, Callable[[Any, Scenario, TestbedShape], str | None]] = every_kind(
    {"chat": _chat_over, "agent_swarm": _swarm_over, "trace_replay": _trace_over, "agent_trace": _agent_trace_over},
    __name__)


def context_warnings(scenario: Scenario) -> list[str]:
    """One line per persona whose trace rows or dataset conversations cannot fit the testbed's context (and per
    swarm whose shared context alone cannot)."""
    shape = testbed_shape(scenario)
    if shape is None:
        return []
    out: list[str] = []
    for persona in scenario.personas:
        line = OVER[persona.kind](persona, scenario, shape)
        if line:
            out.append(line)
    return out


def dry_run_notes(scenario: Scenario) -> list[str]:
    """What a dry run adds for a testbed target: which testbed, and every context warning."""
    shape = testbed_shape(scenario)
    if shape is None:
        return []
    return [f"target: {shape.describe()}", *(f"warning: {line}" for line in context_warnings(scenario))]
