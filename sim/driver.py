"""The simulated load process: identity, clock, shard, tier wires, and one logical request attempt by attempt.

It plays the part of ``loadgen/engine`` (``WorkerContext`` + ``attempts``) in virtual time, as one load
process (``--processes 1``): the personas' seeded streams are the same as that real process's.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rushhour import stacks
from rushhour.loadgen import control
from rushhour.loadgen.flow.protocol import Logical
from rushhour.loadgen.ids import new_id
from rushhour.loadgen.schedule import seeded_rng
from rushhour.loadgen.tiers import TierWire, map_tier, pins_output
from rushhour.records.record import EventRecord, Record, RequestRecord, ShardWriter, TaskRecord
from rushhour.scenarios.model import Scenario
from rushhour.sim.client import Deadlines, Exchange, error_facts
from rushhour.sim.cluster import Cluster
from rushhour.sim.loop import NS, Loop, Sleep, Timer
from rushhour.testbed.flow import REJECTED_CAPACITY
from rushhour.testbed.job import QUEUE_FULL, Job
from rushhour.testbed.profiles import Classified, OpenAIProfile
from rushhour.testbed.tokens import BYTES_PER_TOKEN

# The JSON around a prompt (model, max_tokens, stream, per-message role keys): only flow control's byte
# capacities see it, and they are far from binding on these sizes.
BODY_OVERHEAD_BYTES = 120
MESSAGE_OVERHEAD_BYTES = 32


@dataclass(slots=True)
class SimRoute:
    """One route (the primary or a fallback) as a simulated stack of its own: how each (tier, tenant) looks on it."""

    name: str
    url: str
    model: str
    dialect: str
    cluster: Cluster
    wires: dict[tuple[str, str], TierWire]
    pin_output: bool
    profile_name: str = ""
    credential: str | None = None
    classified: dict[tuple[str, str], Classified] = field(default_factory=dict)
    drop_facts: dict[str, tuple[int, str | None, str | None, float | None]] = field(default_factory=dict)

    def classify(self, tier: str, tenant: str) -> Classified:
        """The profile's reading of a tier's requests, once (from the wire's headers and body fields; no
        profile reads the model or max_tokens, the only body fields that vary between a tier's requests)."""
        key = (tier, tenant)
        cl = self.classified.get(key)
        if cl is None:
            wire = self.wires[key]
            headers = {k.lower(): v for k, v in wire.headers.items()}
            cl = self.classified[key] = self.profile.classify(headers, {"model": self.model, **wire.body})
        return cl

    def full_band_facts(self, rid: str) -> tuple[int, str | None, str | None, float | None]:
        """(status, reason, error, Retry-After) of the gateway's answer to a full band, as ``Exchange.reply``
        reads them; remembered unless the answer names the request."""
        facts = self.drop_facts.get(QUEUE_FULL)
        if facts is not None:
            return facts
        reply = self.profile.drop(QUEUE_FULL, rid, False)
        facts = (reply.status, *error_facts(reply))
        if rid.encode() not in reply.body and not any(rid in v for v in reply.headers.values()):
            self.drop_facts[QUEUE_FULL] = facts
        return facts

    @property
    def profile(self) -> Any:
        return self.cluster.stack.profile


def sim_route(scenario: Scenario, name: str, url: str, profile: str, model: str, dialect: str,
              credential: str | None, cluster: Cluster) -> SimRoute:
    """A route's wires (every tier mapped on its profile) over its simulated stack."""
    wires = {(t.name, tenant): map_tier(t, tenant, profile, dialect, credential_override=credential)
             for t in scenario.tiers for tenant in t.tenant_ids}
    pin = scenario.target.pin_output
    pinned = (stacks.get(profile).wire.pin_output if pin is None else pin) and dialect != "anthropic-messages"
    return SimRoute(name, url, model, dialect, cluster, wires, pinned, profile, credential)


class Env:
    """One simulated load process's shared state."""

    def __init__(self, scenario: Scenario, loop: Loop, cluster: Cluster, writer: ShardWriter, run_id: str) -> None:
        self.scenario = scenario
        self.loop = loop
        self.cluster = cluster
        self.writer = writer
        self.run_id = run_id
        target = scenario.target
        self.routes: list[SimRoute] = [
            sim_route(scenario, "primary", target.url, target.profile, target.model, target.dialect, None, cluster)]
        self.live: set[Exchange] = set()
        self.tasks: dict[int, TaskRecord] = {}
        self.stopping = False
        self.counters = {"sent": 0, "not_sent": 0, "attempts": 0, "tasks": 0}
        self._not_sent_window: dict[str, tuple[int, int, int]] = {}  # persona -> (interval start, records, missed)
        self.live_scale: tuple[float, str | None] = (1.0, None)  # the find-limit controller's (scale, persona)
        # each attempt's front-end delay on a calibrated preset with a spread, drawn in arrival order (the loop's
        # order is deterministic, so the same scenario and seed draw the same delays)
        self.front_end_rng = seeded_rng(scenario.seed, "front-end")

    def load_scale(self, persona: str) -> float:
        """The live multiplier of ``persona``'s arrival rate (set by the find-limit controller; else 1)."""
        scale, only = self.live_scale
        return scale if only is None or only == persona else 1.0

    # ---- clock and identity ----------------------------------------------------------------
    @property
    def now(self) -> int:
        return self.loop.clock.t

    @property
    def end_ns(self) -> int:
        return int(self.scenario.duration_s * NS)

    @property
    def hard_stop_ns(self) -> int:
        return int((self.scenario.duration_s + self.scenario.drain_s) * NS)

    def rng(self, *parts: object) -> Any:
        return seeded_rng(self.scenario.seed, *parts)

    def write(self, record: Record) -> None:
        self.writer.write(record)

    def event(self, name: str, **detail: Any) -> None:
        self.write(EventRecord(self.run_id, self.writer.next_seq(), self.now, name, detail))

    def new_record(self, req: Logical, route: int = 0, **facts: Any) -> RequestRecord:
        r = self.routes[route]
        return RequestRecord(
            run_id=self.run_id, seq=self.writer.next_seq(), request_id=new_id(), logical_id=req.logical_id,
            tier=req.tier, tenant=req.tenant, persona=req.persona, session_id=req.session_id, task_id=req.task_id,
            step=req.step, fanout_index=req.fanout_index, parent_id=req.parent_id, twin_of=req.twin_of,
            control=bool(req.twin_of), route=r.name, endpoint=r.url, model=r.model, dialect=r.dialect,
            stream=self.scenario.stream_for(req.persona),
            key_fingerprint=r.wires[(req.tier, req.tenant)].key_fingerprint,
            intended_ns=req.intended_ns, **facts)

    # ---- tasks -----------------------------------------------------------------------------
    def new_task(self, persona: str, tier: str, tenant: str, task_id: str, start_ns: int,
                 session_id: str = "") -> TaskRecord:
        task = TaskRecord(run_id=self.run_id, seq=0, task_id=task_id, persona=persona, tier=tier, tenant=tenant,
                          session_id=session_id, start_ns=start_ns)
        self.tasks[id(task)] = task
        self.counters["tasks"] += 1
        return task

    def close_task(self, task: TaskRecord, outcome: str) -> None:
        if self.tasks.pop(id(task), None) is None:
            return  # already closed (the hard stop)
        task.seq = self.writer.next_seq()
        task.end_ns = self.now
        task.outcome = outcome
        self.write(task)

    # ---- the generator's shortfall, as the Locust personas count it ------------------------
    def not_sent(self, req: Logical) -> None:
        """No free slot for an arrival: a not_sent record (up to 50 per persona and second, then counted)."""
        start, records, missed = self._not_sent_window.get(req.persona, (self.now, 0, 0))
        if self.now - start >= NS:
            self._flush_shortfall(req.persona, start, missed)
            start, records, missed = self.now, 0, 0
        self.counters["not_sent"] += 1
        if records < 50:
            record = self.new_record(req, not_sent=True)
            record.done_ns = self.now
            self.write(record)
            records += 1
        else:
            missed += 1
        self._not_sent_window[req.persona] = (start, records, missed)

    def _flush_shortfall(self, persona: str, start: int, missed: int) -> None:
        if missed:
            self.event("shortfall", persona=persona, missed=missed, recorded=50,
                       interval_s=round((self.now - start) / NS, 3), behind_s=0.0)

    def flush_shortfalls(self) -> None:
        for persona, (start, _, missed) in self._not_sent_window.items():
            self._flush_shortfall(persona, start, missed)
        self._not_sent_window.clear()

    # ---- the hard stop -----------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel what is still in flight and close the open tasks, as the worker's hard stop does."""
        for ex in sorted(self.live, key=lambda e: e.record.seq):
            ex.stop()
            self.write(ex.record)
        self.live.clear()
        for task in sorted(self.tasks.values(), key=lambda t: t.start_ns):
            task.seq = self.writer.next_seq()
            task.end_ns = self.now
            task.outcome = "cancelled"
            self.write(task)
        self.tasks.clear()


def from_quantiles(quantiles: Sequence[float], u: float) -> float:
    """The value at ``u`` in [0, 1) of the distribution whose evenly spaced quantiles (0 % … 100 %) these are,
    linear between them: a draw when ``u`` is uniform."""
    x = u * (len(quantiles) - 1)
    i = min(int(x), len(quantiles) - 2)
    return quantiles[i] + (x - i) * (quantiles[i + 1] - quantiles[i])


def attempt(env: Env, req: Logical, route: SimRoute, rec: RequestRecord) -> Generator[Any, Any, RequestRecord]:
    """One attempt on ``route`` (the flow's ``Send``): the testbed server's admission path, then the engine's
    events until it ends; fills ``rec`` (the flow writes it)."""
    scenario = env.scenario
    now = env.now
    rec.sent_ns = now
    wire = _control_wire(scenario, req, route) if req.twin_of else route.wires[(req.tier, req.tenant)]
    dialect = route.dialect
    size = req.prompt.server_size(dialect)
    rec.prompt_tokens_intended, rec.prompt_tokens_exact = req.prompt.tokens, False
    rec.max_tokens = req.max_tokens
    rec.output_pinned = pins_output(route.pin_output, req.tools)
    rec.tools_offered = bool(req.tools)  # the body offers the persona's tools (the answer is text: not modelled)
    rec.prompt_bytes = size + BODY_OVERHEAD_BYTES + MESSAGE_OVERHEAD_BYTES * (len(req.prompt.messages) + 1)
    env.counters["sent"] += 1
    env.counters["attempts"] += 1
    cluster = route.cluster
    stack = cluster.stack
    prof = route.profile
    if req.twin_of:
        cl = prof.classify({k.lower(): v for k, v in wire.headers.items()}, {"model": route.model, **wire.body})
    else:
        cl = route.classify(req.tier, req.tenant)
    prompt_tokens = max(1, -(-size // BYTES_PER_TOKEN))  # testbed.tokens.count_tokens of those bytes
    params = cluster.engine.params
    front_s = (from_quantiles(params.front_end_quantiles_s, env.front_end_rng.random())
               if params.front_end_quantiles_s else params.front_end_s)
    if front_s > 0:  # a calibrated server's front end: the engine sees the request this much after it was sent
        yield Sleep(now + int(front_s * NS))
        now = env.now
    max_model_len = cluster.engine.params.kv_capacity_tokens
    flow = stack.flow
    if (flow is not None and not stack.faults.faults and now >= stack.ready_ns
            and prompt_tokens + req.max_tokens <= max_model_len and flow.full(cl.priority, rec.prompt_bytes)):
        # The gateway turns it away at once (a rejection storm's thousands a second). Without faults (every
        # replica up, no injected error or cut drawn) the path below would build a job, have flow.enqueue
        # refuse and count it, end the exchange with the profile's 429 before any deadline and resume at
        # this instant: the same facts, count and resume, without the job and the exchange.
        flow.left(cl.priority, REJECTED_CAPACITY, cl.tenant, 0)
        rec.status, rec.reason, rec.error, rec.retry_after_s = route.full_band_facts(rec.request_id)
        rec.headers_ns = rec.done_ns = now
        yield Sleep(now)
        return rec
    ex = Exchange(env.loop, rec, prof, rec.stream, cluster.cancel)
    env.live.add(ex)
    # the client's deadlines: the user's patience shortens the first-token one, as in loadgen.engine.attempts
    t = scenario.resilience.timeouts
    ttft_s, patience = t.ttft_s, False
    if req.patience_s is not None and req.patience_s < ttft_s:
        ttft_s, patience = max(req.patience_s, 0.001), True
    sent = rec.sent_ns
    deadlines = Deadlines(sent + int(ttft_s * NS), sent + int(t.total_s * NS), patience)
    ex.service_tier = cl.service_tier if isinstance(prof, OpenAIProfile) else None
    inj = stack.faults.error_for_arrival(now)
    if prompt_tokens + req.max_tokens > max_model_len:
        ex.reply(prof.bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + req.max_tokens} tokens ({prompt_tokens} in the messages, {req.max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.", rec.request_id))
    elif inj is not None:
        injected = prof.injected(inj.spec.status, rec.request_id)
        if inj.spec.retry_after_s is not None:
            injected.headers["Retry-After"] = f"{inj.spec.retry_after_s:g}"
        ex.reply(injected)
    elif now < stack.ready_ns:
        ex.reply(stack.not_ready(rec.request_id))
    else:
        if rec.stream:
            cut = stack.faults.cut_for_arrival(now)
            if cut is not None:
                ex.cut_after = max(1, cut.spec.after_tokens)
        # the prefix-cache blocks only for a request the gateway will not turn away at once (a rejection storm
        # would hash every new task's context for nothing)
        full = flow is not None and flow.full(cl.priority, rec.prompt_bytes)
        blocks: Sequence[int] = () if full else req.prompt.server_view(dialect, cluster.engine.params.block_tokens)[1]
        job = Job(rid=rec.request_id, arrival_ns=now, prompt_tokens=prompt_tokens, max_tokens=req.max_tokens,
                  blocks=blocks, body_bytes=rec.prompt_bytes, priority=cl.priority,
                  rank=cl.rank, tier=cl.tier, tenant=cl.tenant, sink=ex)
        ex.job = job
        reply = cluster.admit(job)
        if reply is not None:
            ex.reply(reply)
    timers: tuple[Timer, ...] = ()
    if not ex.done.done:  # an answer at once needs no deadline (a storm's 429s would fill the heap with them)
        timers = (env.loop.timer(deadlines.first_token_ns or 0, _first_token_deadline, ex, deadlines),
                  env.loop.timer(deadlines.total_ns or 0, ex.timeout, deadlines))
    result: RequestRecord = yield ex.done
    # An ended attempt's deadlines are void: cancelled, they stop holding the exchange and its record in the
    # heap until the total deadline, 600 s by default (≈ 50k ended attempts at a time in the realistic
    # benchmark case).
    for timer in timers:
        timer.cancel()
    env.live.discard(ex)
    if result.abandoned:
        result.error = f"abandoned: no first token within the user's patience ({ttft_s:.1f} s)"
    return result


def _control_wire(scenario: Scenario, req: Logical, route: SimRoute) -> TierWire:
    """A control twin's wire: the tier's identity at the neutral priority (``loadgen.control``)."""
    spec = control.control_of(scenario, req.tier)
    assert spec is not None  # a twin exists only under a control
    return control.control_wire(scenario.tier(req.tier), req.tenant, route.profile_name, route.dialect, spec,
                                control.neutral_priority(scenario, spec), credential_override=route.credential)


def _first_token_deadline(ex: Exchange, deadlines: Deadlines) -> None:
    if ex.record.first_token_ns is None:
        ex.timeout(deadlines)
