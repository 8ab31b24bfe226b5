"""The scenario's personas in virtual time: ``loadgen.flow`` (the Locust personas' own code) on the event heap.

``SimHost`` is one simulated load process (worker 0 of 1: the seeded streams of a real ``--processes 1``
run) as the flows' ``Host``; ``run_flow`` is their driver here: ``Wait`` is a loop ``Sleep``, ``Send`` one
simulated attempt on the route's stack (``sim.driver.attempt``), ``Fork`` and ``Spawn`` loop tasks. The
retries, fallback routes and circuit breakers are the real ones (``loadgen.flow.send``,
``loadgen.resilience``, ``loadgen.breaker`` on the virtual clock).
"""

from __future__ import annotations

import random
from collections.abc import Generator
from typing import Any

from rushhour.loadgen.breaker import RouteBreaker
from rushhour.loadgen.budget import BudgetGuard
from rushhour.loadgen.flow.kinds import FLOWS
from rushhour.loadgen.flow.protocol import Flow, Fork, Logical, Send, Spawn, Wait
from rushhour.records.record import BreakerRecord, RequestRecord, TaskRecord
from rushhour.scenarios.model import Persona, Scenario
from rushhour.sim.driver import Env, attempt
from rushhour.sim.loop import NS, Sleep
from rushhour.sim.prompt import Conversation, from_text, piece

Task = Generator[Any, Any, Any]


class SimHost:
    """The simulated load process as the flows' ``Host``."""

    __slots__ = ("_announced", "breakers", "budget", "env", "route_names", "stop_reason")

    worker_index = 0
    workers = 1

    def __init__(self, env: Env) -> None:
        self.env = env
        self.route_names = [r.name for r in env.routes]
        # the process's whole budget, as a single Locust process holds it (no master to lease from)
        self.budget: BudgetGuard | None = BudgetGuard(env.scenario.budget) if env.scenario.budget else None
        self._announced: set[str] = set()
        self.stop_reason: str | None = None
        self.breakers: dict[str, RouteBreaker] = {}
        cfg = env.scenario.resilience.breaker
        if cfg is not None:
            clock = env.loop.clock
            for name in self.route_names:
                self.breakers[name] = RouteBreaker(name, cfg.fail_max, cfg.reset_timeout_s, self._breaker_changed,
                                                   clock=lambda: clock.t / NS)

    def _breaker_changed(self, route: str, old: str, new: str, cause: str | None) -> None:
        env = self.env
        env.write(BreakerRecord(env.run_id, env.writer.next_seq(), env.now, route, new, old, cause))

    @property
    def scenario(self) -> Scenario:
        return self.env.scenario

    @property
    def stopping(self) -> bool:
        return self.env.stopping

    def now_ns(self) -> int:
        return self.env.loop.clock.t

    def rng(self, *parts: object) -> random.Random:
        rng: random.Random = self.env.rng(*parts)
        return rng

    def attempt_record(self, req: Logical, route: int, **facts: Any) -> RequestRecord:
        return self.env.new_record(req, route, **facts)

    def finish(self, record: RequestRecord) -> None:
        self.env.write(record)

    def budget_reached(self, tier: str | None) -> None:
        """Announce a reached budget once per scope; the run's stops the arrivals (as in a Locust process)."""
        assert self.budget is not None
        scope = self.budget.stop_scope(tier) or "run"
        key = "run" if scope == "run" else f"tier:{tier}"
        if key in self._announced:
            return
        self._announced.add(key)
        self.env.event("budget_reached", **self.budget.detail(tier))
        if scope == "run":
            self.env.stopping = True
            self.stop_reason = "budget"

    def budget_usage(self) -> dict[str, Any] | None:
        """The ``budget_usage`` event's detail at the stop (run.json merges it), or None without a budget."""
        if self.budget is None:
            return None
        return {"workers": 1, "worker_index": 0, **self.budget.snapshot()}

    def new_task(self, persona: str, tier: str, tenant: str, task_id: str, start_ns: int,
                 session_id: str = "") -> TaskRecord:
        return self.env.new_task(persona, tier, tenant, task_id, start_ns, session_id)

    def close_task(self, task: TaskRecord, outcome: str) -> None:
        self.env.close_task(task, outcome)

    def not_sent(self, req: Logical) -> None:
        self.env.not_sent(req)

    def behind(self, persona: str, t_s: float) -> bool:
        return False  # the simulated generator is never late

    def load_scale(self, persona: str) -> float:
        return self.env.load_scale(persona)

    def flush_shortfall(self, persona: str) -> None:
        pass  # the run flushes every persona's window when arrivals end

    def text(self, key: str, tokens: int) -> Any:
        return piece(key, tokens)

    def conversation(self, system: Any = "") -> Conversation:
        return Conversation(system)

    def copy(self, conv: Conversation) -> Conversation:
        return Conversation(conv.system, list(conv.messages))

    def from_prompt(self, conv: Any) -> Conversation:
        return from_text(conv)


def run_flow(host: SimHost, flow: Flow) -> Task:
    """Drive a flow on the loop: a loop task that turns its commands into loop events."""
    env = host.env
    loop = env.loop
    value: Any = None
    while True:
        try:
            cmd = flow.send(value)
        except StopIteration as stop:
            return stop.value
        kind = type(cmd)
        if kind is Send:
            value = yield from attempt(env, cmd.req, env.routes[cmd.route], cmd.record)
        elif kind is Wait:
            yield Sleep(cmd.until_ns)
            value = None
        elif kind is Fork:
            value = yield [loop.spawn(run_flow(host, task)) for task in cmd.tasks]
        elif kind is Spawn:
            loop.spawn(run_flow(host, cmd.task))
            value = None
        else:  # pragma: no cover - a programming error in a flow
            raise TypeError(f"a flow yielded {cmd!r}")


def run_persona(host: SimHost, persona: Persona) -> Task:
    """The persona's driver loop (chat arrivals, a swarm, a trace replay) as a loop task."""
    return run_flow(host, FLOWS[persona.kind](host, persona))
