"""The shared persona layer (``loadgen/flow``) driven by a fake transport: retries, fallback, breaker, budget.

A third driver, synchronous and in fake time, shows the protocol is the whole contract: whatever runs
``Wait``/``Send``/``Fork``/``Spawn`` gets the same decisions (the gevent and virtual-time drivers are
tested end to end in ``tests/e2e/test_sim_resilience.py``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from rushhour.loadgen import prompts
from rushhour.loadgen.breaker import RouteBreaker
from rushhour.loadgen.budget import BudgetGuard
from rushhour.loadgen.flow.protocol import NS, Flow, Fork, Logical, Send, Spawn, Wait
from rushhour.loadgen.flow.send import send_logical
from rushhour.loadgen.schedule import seeded_rng
from rushhour.records.record import RequestRecord, TaskRecord
from rushhour.scenarios import parse_scenario
from rushhour.scenarios.model import Scenario

SCENARIO = """
name: flow
seed: 3
target: {url: "http://127.0.0.1:9", profile: vllm}
tiers: [{name: t, priority: 0}]
personas:
  - {kind: chat, name: c, tier: t, arrival: {process: poisson, rate: 1}, turns: 1}
phases: [{name: p, duration: 10s}]
resilience:
  retries: {on: ["503"], max_attempts: 2, backoff: fixed, base_s: 0.25}
  fallback: [{name: standby, url: "http://127.0.0.1:10", profile: vllm}]
  breaker: {fail_max: 2, reset_timeout_s: 1}
"""

Answer = Callable[[str], int]  # route name -> HTTP status


class FakeHost:
    """A process in fake time whose transport answers by route (``answer``); it keeps every record."""

    worker_index = 0
    workers = 1
    stopping = False

    def __init__(self, scenario: Scenario, answer: Answer, budget: BudgetGuard | None = None) -> None:
        self.scenario = scenario
        self.answer = answer
        self.budget = budget
        self.t = 0
        self.route_names = ["primary", "standby"]
        self.records: list[RequestRecord] = []
        self.changes: list[tuple[float, str, str, str]] = []
        self.waits: list[float] = []
        self.breakers = {name: RouteBreaker(name, 2, 1.0, self._changed, clock=lambda: self.t / NS)
                         for name in self.route_names}

    def _changed(self, route: str, old: str, new: str, cause: str | None) -> None:
        self.changes.append((self.t / NS, route, old, new))

    def now_ns(self) -> int:
        return self.t

    def rng(self, *parts: object) -> random.Random:
        return seeded_rng(self.scenario.seed, *parts)

    def attempt_record(self, req: Logical, route: int, **facts: Any) -> RequestRecord:
        return RequestRecord(run_id="r", seq=len(self.records), request_id=f"a{len(self.records)}",
                             logical_id=req.logical_id, tier=req.tier, tenant=req.tenant, persona=req.persona,
                             route=self.route_names[route], intended_ns=req.intended_ns, **facts)

    def finish(self, record: RequestRecord) -> None:
        self.records.append(record)

    def budget_reached(self, tier: str | None) -> None:
        self.stopping = True

    def new_task(self, persona: str, tier: str, tenant: str, task_id: str, start_ns: int,
                 session_id: str = "") -> TaskRecord:
        return TaskRecord("r", 0, task_id, persona, tier, tenant, session_id, start_ns)

    def close_task(self, task: TaskRecord, outcome: str) -> None: ...
    def not_sent(self, req: Logical) -> None: ...
    def behind(self, persona: str, t_s: float) -> bool:
        return False

    def load_scale(self, persona: str) -> float:
        return 1.0

    def flush_shortfall(self, persona: str) -> None: ...
    def text(self, key: str, tokens: int) -> str:
        return prompts.text(key, tokens)

    def conversation(self, system: Any = "") -> prompts.Conversation:
        return prompts.Conversation(system)

    def copy(self, conv: prompts.Conversation) -> prompts.Conversation:
        return prompts.Conversation(conv.system, list(conv.messages), conv.calls)

    def from_prompt(self, conv: prompts.Conversation) -> prompts.Conversation:
        return conv

    # ---- the driver ---------------------------------------------------------------------------
    def drive(self, flow: Flow, cancel_on_send: bool = False) -> Any:
        value: Any = None
        while True:
            try:
                cmd = flow.send(value)
            except StopIteration as stop:
                return stop.value
            value = None
            if isinstance(cmd, Send):
                rec = cmd.record
                rec.sent_ns = self.t
                if cancel_on_send:
                    rec.cancelled = True
                    flow.throw(KeyboardInterrupt())
                rec.status = self.answer(self.route_names[cmd.route])
                rec.complete = rec.status == 200
                self.t += NS // 10  # every answer takes 100 ms
                rec.done_ns = self.t
                value = rec
            elif isinstance(cmd, Wait):
                self.waits.append((cmd.until_ns - self.t) / NS)
                self.t = max(self.t, cmd.until_ns)
            elif isinstance(cmd, Fork):
                value = [self.drive(task) for task in cmd.tasks]
            elif isinstance(cmd, Spawn):
                self.drive(cmd.task)


def _req(n: int = 0) -> Logical:
    return Logical("t", "default", "c", prompts.Conversation("", [("user", "hi")]), 8, 0, logical_id=f"L{n}")


def test_retry_then_fallback_with_the_policy_backoff() -> None:
    host = FakeHost(parse_scenario(SCENARIO, "s.yaml"), lambda route: 503 if route == "primary" else 200)
    record = host.drive(send_logical(host, _req()))
    assert record.status == 200 and record.route == "standby"
    assert [(r.route, r.attempt, r.status) for r in host.records] == [
        ("primary", 1, 503), ("primary", 2, 503), ("standby", 3, 200)]
    assert host.records[1].retry_reason and host.records[1].retry_reason.startswith("503")
    assert host.records[2].retry_reason and host.records[2].retry_reason.startswith("503")
    assert host.waits == [0.25]  # the fixed backoff, in the driver's time


def test_the_breaker_opens_refuses_probes_and_closes() -> None:
    down = [True]
    host = FakeHost(parse_scenario(SCENARIO, "s.yaml"),
                    lambda route: 503 if route == "primary" and down[0] else 200)
    host.drive(send_logical(host, _req(1)))  # two failures on the primary: it opens
    assert [c[1:] for c in host.changes] == [("primary", "closed", "open")]
    host.records.clear()
    host.drive(send_logical(host, _req(2)))  # refused at once, moved to the standby route
    assert [(r.route, r.reason, r.sent_ns == r.done_ns) for r in host.records] == [
        ("primary", "breaker_open", True), ("standby", None, False)]
    down[0] = False
    host.t += 2 * NS  # past the reset timeout: one probe goes through, succeeds, closes
    host.records.clear()
    record = host.drive(send_logical(host, _req(3)))
    assert record.route == "primary" and record.status == 200
    assert [c[2:] for c in host.changes[1:]] == [("open", "half_open"), ("half_open", "closed")]


def test_the_budget_refuses_before_sending() -> None:
    scenario = parse_scenario(SCENARIO + "budget: {max_requests: 1}\n", "s.yaml")
    assert scenario.budget is not None
    host = FakeHost(scenario, lambda route: 200, BudgetGuard(scenario.budget))
    assert host.drive(send_logical(host, _req(1))).status == 200
    refused = host.drive(send_logical(host, _req(2)))
    assert refused.not_sent and refused.reason == "budget" and host.stopping
    assert len(host.records) == 2 and refused.sent_ns is not None


def test_a_cancel_thrown_in_is_recorded_and_frees_the_probe() -> None:
    host = FakeHost(parse_scenario(SCENARIO, "s.yaml"), lambda route: 200)
    breaker = host.breakers["primary"]
    breaker.force_open("test")
    host.t += 3 * NS  # the next attempt is the half-open probe
    with pytest.raises(KeyboardInterrupt):
        host.drive(send_logical(host, _req()), cancel_on_send=True)
    assert [r.cancelled for r in host.records] == [True]  # written once, by the flow
    assert breaker.allow()  # the probe slot was freed: the next attempt may probe
