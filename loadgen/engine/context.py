"""Everything one Locust process shares while it drives load: run identity, clock, shard, routes, counters."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rushhour import stacks
from rushhour.loadgen.engine.wire.client import Timeouts
from rushhour.loadgen.engine.wire.http import Endpoint
from rushhour.loadgen.schedule import seeded_rng
from rushhour.loadgen.tiers import TierWire, map_tier
from rushhour.records.record import Anchor, EventRecord, Record, RequestRecord, ShardWriter
from rushhour.scenarios.model import Scenario


@dataclass(slots=True)
class RouteWire:
    """One route (primary or a fallback): where it is and how each (tier, tenant) looks on it."""

    name: str
    url: str
    endpoint: Endpoint
    profile: str
    model: str
    dialect: str
    tiers: dict[tuple[str, str], TierWire]
    pin_output: bool = False  # the body asks for exactly max_tokens (see loadgen.engine.wire.dialects)


def build_routes(
    scenario: Scenario,
    primary_url: str,
    testbed_url: str | None = None,
    route_urls: dict[str, str] | None = None,
) -> list[RouteWire]:
    """The primary route and the scenario's fallbacks, every tier mapped (errors before any send).

    ``route_urls`` (route name → URL, from the runner) says where each route listens; a fallback
    route with ``url: testbed`` gets its own testbed there. Without it, such a route falls back to
    ``testbed_url`` (a Locust started by hand against one testbed).
    """
    target = scenario.target
    urls = route_urls or {}
    routes = [_route("primary", primary_url, target.profile, target.model, target.dialect, scenario, None)]
    for fb in scenario.resilience.fallback:
        url = urls.get(fb.name) or (testbed_url if fb.url == "testbed" and testbed_url else fb.url)
        routes.append(
            _route(
                fb.name,
                url,
                fb.profile,
                fb.model or target.model,
                fb.dialect or target.dialect,
                scenario,
                fb.credential,
            )
        )
    return routes


def _route(
    name: str, url: str, profile: str, model: str, dialect: str, scenario: Scenario, credential: str | None
) -> RouteWire:
    tiers = {
        (tier.name, tenant): map_tier(tier, tenant, profile, dialect, credential_override=credential)
        for tier in scenario.tiers
        for tenant in tier.tenant_ids
    }
    asked = scenario.target.pin_output
    pin = (stacks.get(profile).wire.pin_output if asked is None else asked) and dialect != "anthropic-messages"
    return RouteWire(name, url, Endpoint.parse(url), profile, model, dialect, tiers, pin)


@dataclass
class Counters:
    """Per-process totals for the health line and the live view."""

    sent: int = 0
    not_sent: int = 0
    in_flight: int = 0
    done: int = 0


@dataclass
class WorkerContext:
    """The state one Locust process needs to drive its share of the scenario."""

    scenario: Scenario
    run_id: str
    anchor: Anchor
    writer: ShardWriter
    routes: list[RouteWire]
    worker_index: int = 0
    workers: int = 1
    counters: Counters = field(default_factory=Counters)
    on_attempt: Callable[[RequestRecord], None] | None = None  # fires Locust's request event
    budget: Any = None  # loadgen.budget.BudgetGuard when the scenario has a budget
    breakers: dict[str, Any] = field(default_factory=dict)  # route name -> loadgen.breaker.RouteBreaker
    shortfalls: dict[str, Any] = field(default_factory=dict)  # persona -> personas.common.Shortfall
    host: Any = None  # loadgen.engine.personas.drive.EngineHost: this context as the shared personas' host
    group: Any = None  # the worker's gevent Group of in-flight work: control twins join it (drain, cancel)
    load_scale: Any = None  # loadgen.livescale.LiveScale in a find-limit run: the controller's multiplier
    stopping: bool = False  # no new arrivals (the schedule ended, or a stop was asked)
    stop_reason: str | None = None

    def budget_in_flight(self) -> int:
        """Requests the budget counts in flight: reserved and not settled (a leased grant is reserved for its
        send when the master's answer is read, before that send resumes: issue #15)."""
        return int(self.budget.snapshot()["run"]["in_flight"]) if self.budget is not None else 0

    @property
    def timeouts(self) -> Timeouts:
        t = self.scenario.resilience.timeouts
        return Timeouts(connect_s=t.connect_s, ttft_s=t.ttft_s, total_s=t.total_s, keepalive_s=t.keepalive_s)

    @property
    def end_s(self) -> float:
        """When arrivals stop (seconds from the anchor)."""
        return self.scenario.duration_s

    @property
    def hard_stop_s(self) -> float:
        """When in-flight work is cancelled."""
        return self.scenario.duration_s + self.scenario.drain_s

    def now_s(self) -> float:
        return (time.monotonic_ns() - self.anchor.mono_ns) / 1e9

    def now_ns(self) -> int:
        return time.monotonic_ns() - self.anchor.mono_ns

    def rng(self, *parts: object) -> random.Random:
        """The seeded RNG of one driver/user: (seed, persona, worker index, instance…)."""
        return seeded_rng(self.scenario.seed, *parts)

    def write(self, record: Record) -> None:
        if not self.writer.closed:
            self.writer.write(record)
            if self.writer.error is not None and self.stop_reason != "disk_full":
                # the shard cannot be written (a full disk): stop offering load whose records would be lost
                self.stopping = True
                self.stop_reason = "disk_full"

    def event(self, name: str, **detail: Any) -> None:
        self.write(EventRecord(self.run_id, self.writer.next_seq(), self.now_ns(), name, detail))

    def new_request(self, **fields: Any) -> RequestRecord:
        """A request record with identity filled in (a fresh request_id per attempt)."""
        return RequestRecord(run_id=self.run_id, seq=self.writer.next_seq(), request_id=uuid.uuid4().hex, **fields)
