"""The Locust side of an attempt: its record's identity, the keep-alive pools, and one attempt on the wire.

What to send and what to do after (retries, fallback, the breaker, the budget) is ``loadgen.flow.send``,
shared with the simulator; ``send_logical``/``send_once`` (``personas/drive.py``) drive it with gevent.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rushhour.loadgen import control
from rushhour.loadgen.engine.context import RouteWire, WorkerContext
from rushhour.loadgen.engine.wire.client import KEEPALIVE_S, ConnectionPool, perform
from rushhour.loadgen.engine.wire.dialects import build_body
from rushhour.loadgen.engine.wire.http import build_request
from rushhour.loadgen.flow.protocol import Logical as Logical
from rushhour.loadgen.prompts import ToolCall
from rushhour.loadgen.tiers import TierWire, pins_output
from rushhour.loadgen.tokens import TokenizerError
from rushhour.records.record import REASON_TEMPLATE, RequestRecord
from rushhour.records.traceparent import HEADER as TRACE_HEADER
from rushhour.records.traceparent import traceparent


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
        parent_id=req.parent_id,
        twin_of=req.twin_of,
        control=bool(req.twin_of),
        route=route.name,
        endpoint=route.url,
        model=route.model,
        dialect=route.dialect,
        stream=ctx.scenario.stream_for(req.persona),
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


def _control_wire(ctx: WorkerContext, req: Logical, route: RouteWire) -> TierWire:
    spec = control.control_of(ctx.scenario, req.tier)
    assert spec is not None  # a twin exists only under a control
    tier = ctx.scenario.tier(req.tier)
    override = next((fb.credential for fb in ctx.scenario.resilience.fallback if fb.name == route.name), None)
    return control.control_wire(tier, req.tenant, route.profile, route.dialect, spec,
                                control.neutral_priority(ctx.scenario, spec), credential_override=override)


def wire_send(ctx: WorkerContext, pools: Pools, req: Logical, route: RouteWire, record: RequestRecord) -> RequestRecord:
    """One attempt on the wire (the driver's ``Send``): fills ``record``; raises ``Cancelled`` after filling it.

    The breaker, the budget and writing the record are the flow's (``loadgen.flow.send.send_once``).
    """
    wire = _control_wire(ctx, req, route) if req.twin_of else route.tiers[(req.tier, req.tenant)]
    pinned = pins_output(route.pin_output, req.tools)
    path, body = build_body(
        route.dialect, route.model, req.prompt, req.max_tokens, record.stream, wire.body,
        pin_output=pinned, tools=req.tools,
    )
    try:
        record.prompt_tokens_intended, record.prompt_tokens_exact = req.prompt_tokens(route.dialect)
    except TokenizerError as exc:  # the chat template over a cap: nothing is sent, and this process stops its load
        return template_failed(ctx, record, str(exc))
    record.max_tokens = req.max_tokens
    record.output_pinned = pinned
    record.tools_offered = bool(req.tools)
    headers = dict(wire.headers)
    headers["x-request-id"] = record.request_id
    context = traceparent(record.logical_id, record.request_id)
    if context is not None and not any(name.lower() == TRACE_HEADER for name in headers):
        headers[TRACE_HEADER] = context
    request = build_request(route.endpoint, path, headers, body)
    record.prompt_bytes = len(body)
    ctx.counters.sent += 1
    ctx.counters.in_flight += 1
    calls: list[ToolCall] | None = [] if req.tools else None
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
            stream=record.stream,
            timeouts=timeouts,
            record_token_times=ctx.scenario.record_token_times,
            tool_calls=calls,
        )
    finally:
        ctx.counters.in_flight -= 1
    if calls is not None:
        req.reply_calls = calls
        record.tool_call = calls[0].name if calls else None
    if patience is not None and record.client_timeout and record.first_token_ns is None:
        # not the client's deadline but the user's: it gave up, and perform() closed the connection
        record.client_timeout = False
        record.abandoned = True
        record.error = f"abandoned: no first token within the user's patience ({patience:.1f} s)"
    return record


def template_failed(ctx: WorkerContext, record: RequestRecord, message: str) -> RequestRecord:
    """The attempt not sent (its prompt could not be rendered), and the load stopped once: ``template_error``."""
    record.not_sent, record.reason, record.error = True, REASON_TEMPLATE, message
    record.sent_ns = record.done_ns = ctx.now_ns()
    if ctx.stop_reason != "template_error":
        ctx.event("template_error", message=message)
        ctx.stopping, ctx.stop_reason = True, "template_error"
    return record


_budget_announced: set[str] = set()


def budget_reached(ctx: WorkerContext, tier: str | None) -> None:
    """Announce a reached budget once per scope (an event line); the run's stops this process's arrivals."""
    scope = ctx.budget.stop_scope(tier) or "run"
    key = "run" if scope == "run" else f"tier:{tier}"
    if key in _budget_announced:
        return
    _budget_announced.add(key)
    ctx.event("budget_reached", **ctx.budget.detail(tier))
    if scope == "run":
        ctx.stopping = True
        ctx.stop_reason = "budget"


def finish_attempt(ctx: WorkerContext, record: RequestRecord) -> None:
    ctx.write(record)
    ctx.counters.done += 1
    if ctx.on_attempt is not None:
        ctx.on_attempt(record)
