"""The gevent driver of the shared personas (``loadgen.flow``): real sleeping, greenlets and HTTP.

``drive`` runs a flow in the calling greenlet: ``Wait`` sleeps, ``Send`` is one attempt on the wire,
``Fork`` runs the branches in greenlets and joins them, ``Spawn`` starts one in the worker's group. An
exception raised into the greenlet while it waits or sends (the run's hard stop: ``Cancelled``; a
stopped user: ``GreenletExit``) is thrown into the flow, which records what it must and re-raises.
``send_logical`` and ``send_once`` drive one request's flow (the calibration and doctor probes, tests).
"""

from __future__ import annotations

from typing import Any

import gevent
from gevent.pool import Group

from rushhour.loadgen import prompts
from rushhour.loadgen.engine import attempts
from rushhour.loadgen.engine.context import RouteWire, WorkerContext
from rushhour.loadgen.engine.personas import common
from rushhour.loadgen.engine.wire.client import Cancelled
from rushhour.loadgen.flow import send as flow_send
from rushhour.loadgen.flow.protocol import Flow, Fork, Logical, Send, Spawn, Wait
from rushhour.records.record import RequestRecord, TaskRecord
from rushhour.scenarios.model import Scenario

FORK_CANCEL_GRACE_S = 5.0


class EngineHost:
    """A Locust process as the flows' ``Host``: its clock, shard, routes, breakers, budget and shortfall."""

    __slots__ = ("ctx", "route_names", "routes")

    def __init__(self, ctx: WorkerContext, routes: list[RouteWire] | None = None) -> None:
        self.ctx = ctx
        self.routes = ctx.routes if routes is None else routes  # a probe may send on a route of its own
        self.route_names = [r.name for r in self.routes]

    # ---- identity and state --------------------------------------------------------------
    @property
    def scenario(self) -> Scenario:
        return self.ctx.scenario

    @property
    def worker_index(self) -> int:
        return self.ctx.worker_index

    @property
    def workers(self) -> int:
        return self.ctx.workers

    @property
    def breakers(self) -> dict[str, Any]:
        return self.ctx.breakers

    @property
    def budget(self) -> Any:
        return self.ctx.budget

    @property
    def stopping(self) -> bool:
        return self.ctx.stopping

    def now_ns(self) -> int:
        return self.ctx.now_ns()

    def rng(self, *parts: object) -> Any:
        return self.ctx.rng(*parts)

    # ---- records ---------------------------------------------------------------------------
    def attempt_record(self, req: Logical, route: int, **facts: Any) -> RequestRecord:
        return attempts.new_attempt_record(self.ctx, req, self.routes[route], **facts)

    def finish(self, record: RequestRecord) -> None:
        attempts.finish_attempt(self.ctx, record)

    def budget_reached(self, tier: str | None) -> None:
        attempts.budget_reached(self.ctx, tier)

    def new_task(self, persona: str, tier: str, tenant: str, task_id: str, start_ns: int,
                 session_id: str = "") -> TaskRecord:
        task = common.new_task(self.ctx, persona, tier, tenant, session_id)
        task.task_id, task.start_ns = task_id, start_ns
        return task

    def close_task(self, task: TaskRecord, outcome: str) -> None:
        common.close_task(self.ctx, task, outcome)

    def not_sent(self, req: Logical) -> None:
        common.not_sent(self.ctx, req)

    def behind(self, persona: str, t_s: float) -> bool:
        return common.behind(self.ctx, persona, t_s)

    def load_scale(self, persona: str) -> float:
        live = self.ctx.load_scale
        return 1.0 if live is None else float(live.of(persona))

    def flush_shortfall(self, persona: str) -> None:
        found = self.ctx.shortfalls.get(persona)
        if found is not None:
            found.flush()

    # ---- prompts: text -----------------------------------------------------------------------
    def text(self, key: str, tokens: int) -> str:
        return prompts.text(key, tokens)

    def conversation(self, system: Any = "") -> prompts.Conversation:
        return prompts.Conversation(system)

    def copy(self, conv: prompts.Conversation) -> prompts.Conversation:
        return prompts.Conversation(conv.system, list(conv.messages), conv.calls)

    def from_prompt(self, conv: prompts.Conversation) -> prompts.Conversation:
        return conv


def host_of(ctx: WorkerContext) -> EngineHost:
    """The process's host (one per context)."""
    host = ctx.host
    if host is None:
        host = ctx.host = EngineHost(ctx)
    assert isinstance(host, EngineHost)
    return host


def drive(host: EngineHost, pools: attempts.Pools, flow: Flow, group: Group | None = None) -> Any:
    """Run ``flow`` to its end in this greenlet; returns its value. What it spawns joins ``group`` (default: the
    worker's group)."""
    ctx = host.ctx
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            cmd = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value
        value = error = None
        kind = type(cmd)
        try:
            if kind is Send:
                value = attempts.wire_send(ctx, pools, cmd.req, host.routes[cmd.route], cmd.record)
            elif kind is Wait:
                delay = cmd.until_ns / 1e9 - ctx.now_s()
                if delay > 0:
                    gevent.sleep(delay)
            elif kind is Fork:
                value = _fork(host, pools, cmd)
            elif kind is Spawn:
                into = group if group is not None else ctx.group if ctx.group is not None else gevent
                if cmd.pools is None:
                    into.spawn(drive, host, pools, cmd.task)
                else:
                    into.spawn(run_own, host, cmd.task, cmd.pools)
            else:  # pragma: no cover - a programming error in a flow
                raise TypeError(f"a flow yielded {cmd!r}")
        except BaseException as exc:  # a cancel or kill while waiting or sending: the flow records and re-raises
            error = exc


def run_own(host: EngineHost, flow: Flow, max_idle: int = 1) -> Any:
    """Run ``flow`` with its own keep-alive pools (a session, a task, a sub-agent, a twin)."""
    pools = attempts.Pools(max_idle=max_idle)
    try:
        return drive(host, pools, flow)
    finally:
        pools.close()


def _fork(host: EngineHost, pools: attempts.Pools, cmd: Fork) -> list[Any]:
    group = Group()
    if cmd.own_pools:
        glets = [group.spawn(run_own, host, task) for task in cmd.tasks]
    else:
        pools.max_idle = max(pools.max_idle, len(cmd.tasks))
        glets = [group.spawn(drive, host, pools, task) for task in cmd.tasks]
    try:
        group.join(raise_error=True)
    except BaseException:
        group.kill(exception=Cancelled, block=True, timeout=FORK_CANCEL_GRACE_S)
        raise
    return [g.value for g in glets]


def send_logical(ctx: WorkerContext, pools: attempts.Pools, req: Logical, rng_seed: int = 0) -> RequestRecord:
    """Send ``req`` until served or given up (``loadgen.flow.send``, driven here); returns the last attempt's record."""
    record: RequestRecord = drive(host_of(ctx), pools, flow_send.send_logical(host_of(ctx), req, rng_seed))
    return record


def send_once(ctx: WorkerContext, pools: attempts.Pools, req: Logical, route: RouteWire) -> RequestRecord:
    """One attempt on ``route``, no retry or fallback (calibration probes); recorded like any other."""
    # a probe may use a route of its own (the doctor's unknown-model probe): then it is that host's only route
    mine = next((i for i, r in enumerate(ctx.routes) if r is route), None)
    host = host_of(ctx) if mine is not None else EngineHost(ctx, [route])
    record: RequestRecord = drive(host, pools, flow_send.send_once(host, req, mine or 0, 1, None))
    return record
