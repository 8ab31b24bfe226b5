"""One logical request, attempt by attempt: breaker → budget → send → retry/fallback decision.

Every attempt is its own ``RequestRecord`` (same ``logical_id``, its own ``request_id``), so the audit
sees retries and fallback switches with their reasons. Retry policy: the tier's own ``retries`` if set,
else the scenario's ``resilience.retries``. The decisions are ``loadgen.resilience``'s; the waits are
the driver's (real sleeping, or virtual time), so a simulated run retries, falls back and trips the
breaker exactly as a real one does.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, cast

from rushhour.loadgen import control, resilience
from rushhour.loadgen.flow.protocol import NS, Flow, Host, Logical, Send, Spawn, Wait, hard_stop_ns
from rushhour.loadgen.ids import new_id
from rushhour.records.record import RequestRecord


def send_logical(host: Host, req: Logical, rng_seed: int = 0) -> Flow:
    """Send ``req`` until served or given up; returns the last attempt's record."""
    if not req.twin_of:
        yield from _maybe_twin(host, req)
    scenario = host.scenario
    policy = scenario.tier(req.tier).retries or scenario.resilience.retries
    rng = cast(random.Random, _LazyRng(host, ("retry", req.logical_id, rng_seed)))
    routes = len(host.route_names)
    route_index = 0
    attempt_on_route = 0
    attempt = 0
    retry_reason: str | None = None
    started = host.now_ns()  # the total-time budget counts the first attempt too
    while True:
        attempt += 1
        attempt_on_route += 1
        record: RequestRecord = yield from send_once(host, req, route_index, attempt, retry_reason)
        if record.cancelled or record.abandoned or (record.not_sent and record.reason == "budget"):
            return record
        decision = resilience.next_step(
            policy, record, attempt_on_route, (host.now_ns() - started) / NS, rng, routes - 1 - route_index,
            route_index=route_index,
        )
        if decision.action in ("done", "give_up"):
            return record
        retry_reason = decision.reason or None
        if decision.action == "fallback":
            route_index = min(decision.route, routes - 1)
            attempt_on_route = 0
        elif decision.delay_s > 0:
            yield Wait(host.now_ns() + int(decision.delay_s * NS))
        if host.stopping and host.now_ns() >= hard_stop_ns(host):
            return record


class _LazyRng:
    """``host.rng(*parts)``, seeded on first use: the same stream, and most requests never retry (seeding one
    per logical request was a tenth of a simulated rejection storm's time)."""

    __slots__ = ("_host", "_parts", "_rng")

    def __init__(self, host: Host, parts: tuple[object, ...]) -> None:
        self._host, self._parts = host, parts
        self._rng: random.Random | None = None

    def __getattr__(self, name: str) -> Any:
        if self._rng is None:
            self._rng = self._host.rng(*self._parts)
        return getattr(self._rng, name)


def _maybe_twin(host: Host, req: Logical) -> Flow:
    """Send an equal-priority twin of a sampled request at the same moment (the priority control).

    The twin runs on its own (its own connection) with the same retry policy; which of the two leaves
    first is a fair coin, the other follows ``control.STAGGER_S`` later.
    """
    scenario = host.scenario
    spec = control.control_of(scenario, req.tier)
    if spec is None or not control.sampled(req.logical_id, spec.share, scenario.seed):
        return
    twin = replace(req, twin_of=req.logical_id, logical_id=new_id())
    first = control.twin_first(req.logical_id, scenario.seed)
    yield Spawn(_twin(host, twin, first))
    if first:
        yield Wait(host.now_ns() + int(control.STAGGER_S * NS))


def _twin(host: Host, twin: Logical, first: bool) -> Flow:
    if not first:
        yield Wait(host.now_ns() + int(control.STAGGER_S * NS))
    yield from send_logical(host, twin)


def send_once(host: Host, req: Logical, route: int, attempt: int, retry_reason: str | None) -> Flow:
    """One attempt on route number ``route``: refused by the route's open breaker or the budget (nothing is
    sent), or sent; the breaker and the budget learn its outcome; the record is written."""
    name = host.route_names[route]
    record = host.attempt_record(req, route, attempt=attempt, retry_reason=retry_reason)
    expected_prompt = req.prompt.tokens
    # circuit breaker per route: fail fast while open (checked before the budget: nothing is sent)
    breaker = host.breakers.get(name)
    if breaker is not None and not breaker.allow():
        record.reason = "breaker_open"
        record.error = f"circuit breaker open on route {name}"
        record.sent_ns = record.done_ns = host.now_ns()
        host.finish(record)
        return record
    # cost guard: refuse before sending, never after
    budget = host.budget
    if budget is not None and not budget.try_acquire(req.tier, expected_prompt, req.max_tokens):
        record.not_sent = True
        record.reason = "budget"
        record.sent_ns = host.now_ns()
        host.budget_reached(req.tier)
        host.finish(record)
        return record
    try:
        yield Send(req, route, record)
    except GeneratorExit:  # a finished simulation dropping a suspended task: its stop wrote the record
        raise
    except BaseException:  # cancelled in flight: the driver filled the record before throwing
        if breaker is not None:
            breaker.record_cancelled()
        _settle(budget, req, record, expected_prompt)
        host.finish(record)
        raise
    if breaker is not None:
        breaker.record(record)
    _settle(budget, req, record, expected_prompt)
    host.finish(record)
    return record


def _settle(budget: Any, req: Logical, record: RequestRecord, expected_prompt: int) -> None:
    if budget is None:
        return
    billed = 200 <= record.status < 300
    budget.settle(
        req.tier,
        (record.prompt_tokens or expected_prompt) if billed else 0,
        (record.output_tokens or record.tokens) if billed else 0,
        expected_prompt_tokens=expected_prompt,
        expected_output_tokens=req.max_tokens,
    )
