"""One logical request, attempt by attempt: budget → breaker → send → record → retry/fallback decision.

Every attempt is its own ``RequestRecord`` (same ``logical_id``, its own ``request_id``), so the audit
sees retries and fallback switches with their reasons. Retry policy: the tier's own ``retries`` if set,
else the scenario's ``resilience.retries``.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import gevent

from loadgen import control
from loadgen.engine import resilience
from loadgen.engine.context import RouteWire, WorkerContext
from loadgen.engine.wire.client import KEEPALIVE_S, Cancelled, ConnectionPool, perform
from loadgen.engine.wire.dialects import build_body
from loadgen.engine.wire.http import build_request
from loadgen.prompts import Conversation
from loadgen.record import RequestRecord
from loadgen.tiers import TierWire


@dataclass(slots=True)
class Logical:
    """What the persona wants sent once (however many attempts it takes)."""

    tier: str
    tenant: str
    persona: str
    prompt: Conversation
    max_tokens: int
    intended_ns: int
    session_id: str = ""
    task_id: str = ""
    step: int = 0
    fanout_index: int = 0
    patience_s: float | None = None  # the user gives up without a first token by then (None: never)
    tools: list[dict[str, Any]] | None = None  # function tools offered to the model (agents)
    logical_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # dialect -> (intended prompt tokens, exact): one tokenization per logical request, not per attempt
    counted: dict[str, tuple[int, bool]] = field(default_factory=dict)
    twin_of: str = ""  # a control twin (loadgen/control.py): the logical request it copies

    def prompt_tokens(self, dialect: str) -> tuple[int, bool]:
        """The prompt's intended token count on ``dialect`` (counted once; see ``Conversation.prompt_tokens``)."""
        if dialect not in self.counted:
            self.counted[dialect] = self.prompt.prompt_tokens(dialect, self.tools)
        return self.counted[dialect]


def new_attempt_record(ctx: WorkerContext, req: Logical, route: RouteWire, **facts: Any) -> RequestRecord:
    """A fresh record for one attempt of ``req`` on ``route``: identity and route facts filled in."""
    return ctx.new_request(
        logical_id=req.logical_id,
        tier=req.tier,
        tenant=req.tenant,
        persona=req.persona,
        session_id=req.session_id,
        task_id=req.task_id,
        step=req.step,
        fanout_index=req.fanout_index,
        twin_of=req.twin_of,
        control=bool(req.twin_of),
        route=route.name,
        endpoint=route.url,
        model=route.model,
        dialect=route.dialect,
        stream=ctx.scenario.target.stream,
        key_fingerprint=route.tiers[(req.tier, req.tenant)].key_fingerprint,
        intended_ns=req.intended_ns,
        **facts,
    )


class Pools:
    """A user's keep-alive connection pools, one per route."""

    def __init__(self, max_idle: int = 8) -> None:
        self.max_idle = max_idle
        self._pools: dict[str, ConnectionPool] = {}

    def get(self, route: RouteWire, keepalive_s: float = KEEPALIVE_S) -> ConnectionPool:
        pool = self._pools.get(route.name)
        if pool is None:
            pool = self._pools[route.name] = ConnectionPool(route.endpoint, self.max_idle, keepalive_s)
        pool.max_idle = max(pool.max_idle, self.max_idle)
        return pool

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()


def send_logical(ctx: WorkerContext, pools: Pools, req: Logical, rng_seed: int = 0) -> RequestRecord:
    """Send ``req`` until served or given up; returns the last attempt's record."""
    if not req.twin_of:
        _maybe_twin(ctx, req)
    policy = ctx.scenario.tier(req.tier).retries or ctx.scenario.resilience.retries
    rng = ctx.rng("retry", req.logical_id, rng_seed)
    route_index = 0
    attempt_on_route = 0
    attempt = 0
    retry_reason: str | None = None
    started = time.monotonic()  # the total-time budget counts the first attempt too
    while True:
        attempt += 1
        attempt_on_route += 1
        route = ctx.routes[route_index]
        record = _attempt(ctx, pools, req, route, attempt, retry_reason)
        if record.cancelled or record.abandoned or (record.not_sent and record.reason == "budget"):
            return record
        decision = resilience.next_step(
            policy,
            record,
            attempt_on_route,
            time.monotonic() - started,
            rng,
            len(ctx.routes) - 1 - route_index,
            route_index=route_index,
        )
        if decision.action in ("done", "give_up"):
            return record
        retry_reason = decision.reason or None
        if decision.action == "fallback":
            route_index = min(decision.route, len(ctx.routes) - 1)
            attempt_on_route = 0
        elif decision.delay_s > 0:
            gevent.sleep(decision.delay_s)
        if ctx.stopping and ctx.now_s() >= ctx.hard_stop_s:
            return record


def _maybe_twin(ctx: WorkerContext, req: Logical) -> None:
    """Send an equal-priority twin of a sampled request at the same moment (the priority control).

    The twin has its own greenlet and connection and the same retry policy; which of the two leaves
    first is a fair coin, the other follows ``control.STAGGER_S`` later.
    """
    spec = control.control_of(ctx.scenario, req.tier)
    if spec is None or not control.sampled(req.logical_id, spec.share, ctx.scenario.seed):
        return
    twin = replace(req, twin_of=req.logical_id, logical_id=uuid.uuid4().hex)
    first = control.twin_first(req.logical_id, ctx.scenario.seed)

    def run() -> None:
        if not first:
            gevent.sleep(control.STAGGER_S)
        pools = Pools(max_idle=1)
        try:
            send_logical(ctx, pools, twin)
        finally:
            pools.close()

    (ctx.group if ctx.group is not None else gevent).spawn(run)
    if first:
        gevent.sleep(control.STAGGER_S)


def _control_wire(ctx: WorkerContext, req: Logical, route: RouteWire) -> TierWire:
    spec = control.control_of(ctx.scenario, req.tier)
    assert spec is not None  # a twin exists only under a control
    tier = ctx.scenario.tier(req.tier)
    override = next((fb.credential for fb in ctx.scenario.resilience.fallback if fb.name == route.name), None)
    return control.control_wire(tier, req.tenant, route.profile, route.dialect, spec,
                                control.neutral_priority(ctx.scenario, spec), credential_override=override)


def send_once(ctx: WorkerContext, pools: Pools, req: Logical, route: RouteWire) -> RequestRecord:
    """One attempt on ``route``, no retry or fallback (calibration probes); recorded like any other."""
    return _attempt(ctx, pools, req, route, 1, None)


def _attempt(
    ctx: WorkerContext, pools: Pools, req: Logical, route: RouteWire, attempt: int, retry_reason: str | None
) -> RequestRecord:
    wire = _control_wire(ctx, req, route) if req.twin_of else route.tiers[(req.tier, req.tenant)]
    record = new_attempt_record(ctx, req, route, attempt=attempt, retry_reason=retry_reason)
    expected_prompt = req.prompt.tokens
    # circuit breaker per route: fail fast while open (checked before the budget: nothing is sent)
    breaker = ctx.breakers.get(route.name)
    if breaker is not None and not breaker.allow():
        record.reason = "breaker_open"
        record.error = f"circuit breaker open on route {route.name}"
        record.sent_ns = record.done_ns = ctx.now_ns()
        _finish(ctx, record)
        return record
    # cost guard: refuse before sending, never after
    if ctx.budget is not None and not ctx.budget.try_acquire(req.tier, expected_prompt, req.max_tokens):
        record.not_sent = True
        record.reason = "budget"
        record.sent_ns = ctx.now_ns()
        _budget_reached(ctx, req.tier)
        _finish(ctx, record)
        return record
    path, body = build_body(
        route.dialect, route.model, req.prompt, req.max_tokens, ctx.scenario.target.stream, wire.body,
        pin_output=route.pin_output, tools=req.tools,
    )
    record.prompt_tokens_intended, record.prompt_tokens_exact = req.prompt_tokens(route.dialect)
    record.max_tokens = req.max_tokens
    record.output_pinned = route.pin_output
    headers = dict(wire.headers)
    headers["x-request-id"] = record.request_id
    request = build_request(route.endpoint, path, headers, body)
    record.prompt_bytes = len(body)
    ctx.counters.sent += 1
    ctx.counters.in_flight += 1
    timeouts = ctx.timeouts
    patience = req.patience_s if req.patience_s is not None and req.patience_s < timeouts.ttft_s else None
    if patience is not None:  # the user's patience is a first-token deadline shorter than the client's
        timeouts = dataclasses.replace(timeouts, ttft_s=max(patience, 0.001))
    try:
        perform(
            pools.get(route, timeouts.keepalive_s),
            request,
            record,
            anchor_ns=ctx.anchor.mono_ns,
            dialect=route.dialect,
            stream=ctx.scenario.target.stream,
            timeouts=timeouts,
            record_token_times=ctx.scenario.record_token_times,
        )
    except Cancelled:
        if breaker is not None:
            breaker.record_cancelled()
        _settle(ctx, req, record, expected_prompt)
        _finish(ctx, record)
        raise
    finally:
        ctx.counters.in_flight -= 1
    if patience is not None and record.client_timeout and record.first_token_ns is None:
        # not the client's deadline but the user's: it gave up, and perform() closed the connection
        record.client_timeout = False
        record.abandoned = True
        record.error = f"abandoned: no first token within the user's patience ({patience:.1f} s)"
    if breaker is not None:
        breaker.record(record)
    _settle(ctx, req, record, expected_prompt)
    _finish(ctx, record)
    return record


def _settle(ctx: WorkerContext, req: Logical, record: RequestRecord, expected_prompt: int) -> None:
    if ctx.budget is None:
        return
    billed = 200 <= record.status < 300
    ctx.budget.settle(
        req.tier,
        (record.prompt_tokens or expected_prompt) if billed else 0,
        (record.output_tokens or record.tokens) if billed else 0,
        expected_prompt_tokens=expected_prompt,
        expected_output_tokens=req.max_tokens,
    )


_budget_announced: set[str] = set()


def _budget_reached(ctx: WorkerContext, tier: str) -> None:
    scope = ctx.budget.stop_scope(tier) or "run"
    key = "run" if scope == "run" else f"tier:{tier}"
    if key in _budget_announced:
        return
    _budget_announced.add(key)
    ctx.event("budget_reached", **ctx.budget.detail(tier))
    if scope == "run":
        ctx.stopping = True
        ctx.stop_reason = "budget"


def _finish(ctx: WorkerContext, record: RequestRecord) -> None:
    ctx.write(record)
    ctx.counters.done += 1
    if ctx.on_attempt is not None:
        ctx.on_attempt(record)
