"""The persona layer's protocol: what a persona yields to its driver, and what it asks of its process.

A persona (chat, agent swarm, trace replay) and the attempt loop under it (retries, fallback, the
breaker, the budget) are generators. They decide *what* happens and yield commands for *how*:

- ``Wait(until_ns)``: resume at that time (ns from the run's anchor); resumes with None;
- ``Send(req, route, record)``: send one attempt of ``req`` on route number ``route`` and fill ``record``
  with what happened; resumes with that record (a cancelled attempt is thrown in as the driver's own
  exception, after its record was filled);
- ``Fork(tasks)``: run these generators at once; resumes with their results, in order;
- ``Spawn(task)``: start a generator on its own (a session, a task, a control twin); resumes with None.

Two drivers run them: gevent and real HTTP in a Locust process (``loadgen/engine/personas/drive.py``), and
the event heap in virtual time (``sim/personas.py``). Whatever a driver does, the same seeded streams give
the same sessions, tasks, sizes, retries and fallbacks.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from rushhour.loadgen.ids import new_id
from rushhour.loadgen.prompts import ToolCall
from rushhour.records.record import RequestRecord, TaskRecord
from rushhour.scenarios.model import Scenario

NS = 1_000_000_000
Flow = Generator[Any, Any, Any]


@dataclass(slots=True)
class Logical:
    """What the persona wants sent once (however many attempts it takes)."""

    tier: str
    tenant: str
    persona: str
    prompt: Any  # the driver's conversation type (loadgen.prompts.Conversation, or sim.prompt's)
    max_tokens: int
    intended_ns: int
    session_id: str = ""
    task_id: str = ""
    step: int = 0
    fanout_index: int = 0
    patience_s: float | None = None  # the user gives up without a first token by then (None: never)
    tools: list[dict[str, Any]] | None = None  # function tools offered to the model (agents)
    parent_id: str = ""  # a sub-agent's request: the logical id of the call that spawned it
    # the tool calls of the last attempt's answer (filled when ``tools`` were offered)
    reply_calls: list[ToolCall] = field(default_factory=list)
    logical_id: str = field(default_factory=new_id)  # a uuid4's hex
    # dialect -> (intended prompt tokens, exact): one tokenization per logical request, not per attempt
    counted: dict[str, tuple[int, bool]] = field(default_factory=dict)
    twin_of: str = ""  # a control twin (loadgen/control.py): the logical request it copies

    def prompt_tokens(self, dialect: str) -> tuple[int, bool]:
        """The prompt's intended token count on ``dialect`` (counted once; see ``Conversation.prompt_tokens``)."""
        if dialect not in self.counted:
            self.counted[dialect] = self.prompt.prompt_tokens(dialect, self.tools)
        return self.counted[dialect]


@dataclass(slots=True)
class Wait:
    """Resume at ``until_ns`` (at once when it has passed)."""

    until_ns: int


@dataclass(slots=True)
class Send:
    """One attempt of ``req`` on route number ``route`` (0 = primary), filling ``record``."""

    req: Logical
    route: int
    record: RequestRecord


@dataclass(slots=True)
class Fork:
    """Run ``tasks`` at once and resume with their results; ``own_pools``: each its own connections."""

    tasks: list[Flow]
    own_pools: bool = False


@dataclass(slots=True)
class Spawn:
    """Start ``task`` on its own; ``pools``: its own keep-alive pool of that many idle connections, or
    None to share the spawner's."""

    task: Flow
    pools: int | None = 1


class Host(Protocol):
    """What a persona asks of the process that drives it (a Locust process, or the simulated one)."""

    @property
    def scenario(self) -> Scenario: ...
    @property
    def worker_index(self) -> int: ...
    @property
    def workers(self) -> int: ...
    @property
    def breakers(self) -> dict[str, Any]: ...  # route name -> loadgen.breaker.RouteBreaker
    @property
    def budget(self) -> Any: ...  # loadgen.budget.BudgetGuard (or a leased one), None without a budget
    @property
    def stopping(self) -> bool: ...
    @property
    def route_names(self) -> list[str]: ...
    def now_ns(self) -> int: ...
    def rng(self, *parts: object) -> random.Random: ...
    def attempt_record(self, req: Logical, route: int, **facts: Any) -> RequestRecord: ...
    def finish(self, record: RequestRecord) -> None: ...
    def budget_reached(self, tier: str | None) -> None: ...
    def new_task(self, persona: str, tier: str, tenant: str, task_id: str, start_ns: int,
                 session_id: str = "") -> TaskRecord: ...
    def close_task(self, task: TaskRecord, outcome: str) -> None: ...
    def not_sent(self, req: Logical) -> None: ...
    def behind(self, persona: str, t_s: float) -> bool: ...
    def load_scale(self, persona: str) -> float: ...  # the live multiplier of its arrival rate (find-limit)
    def flush_shortfall(self, persona: str) -> None: ...
    def text(self, key: str, tokens: int) -> Any: ...
    def conversation(self, system: Any = "") -> Any: ...
    def copy(self, conv: Any) -> Any: ...
    def from_prompt(self, conv: Any) -> Any: ...


def end_ns(host: Host) -> int:
    """When arrivals stop."""
    return int(host.scenario.duration_s * NS)


def hard_stop_ns(host: Host) -> int:
    """When in-flight work is cancelled."""
    return int((host.scenario.duration_s + host.scenario.drain_s) * NS)


def wait_s(host: Host, seconds: float) -> Wait:
    """Wait ``seconds`` from now."""
    return Wait(host.now_ns() + int(seconds * NS))


def counted(task: Flow, active: list[int]) -> Flow:
    """``task``, holding one of a persona's slots (``active[0]``) until it ends, however it ends."""
    try:
        return (yield from task)
    finally:
        active[0] -= 1
