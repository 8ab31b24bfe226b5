"""The serving stack: profile admission + EPP flow control + replicas + faults, on one clock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime

from rushhour.testbed.clock import Clock
from rushhour.testbed.config import TestbedConfig
from rushhour.testbed.engine import Engine, EngineParams, Replica
from rushhour.testbed.faults import FaultSchedule
from rushhour.testbed.flow import EVICTED_OTHER, FlowController, Revocations
from rushhour.testbed.job import DISPLACED, EVICTED, QUEUE_FULL, RUNNING, WAITING, WAITING_TIMEOUT, Job
from rushhour.testbed.presets import get_preset
from rushhour.testbed.profiles import AnthropicProfile, EppProfile, OpenAIProfile, Reply, make_profile

LEGACY_SATURATED = 1.0  # legacy admission sheds priority<0 at pool saturation >= 1.0 (stacks.md 1.4)
TICK_S = 0.1  # housekeeping period (simulated seconds): faults, SGLang waiting timeout


def engine_params(cfg: TestbedConfig) -> EngineParams:
    """Preset numbers with the config's overrides."""
    p = get_preset(cfg.preset)
    return EngineParams(
        max_num_seqs=cfg.max_num_seqs or p.max_num_seqs,
        kv_capacity_tokens=cfg.kv_capacity_tokens or p.kv_capacity_tokens,
        max_num_batched_tokens=cfg.max_num_batched_tokens or p.max_num_batched_tokens,
        block_tokens=cfg.block_tokens or p.block_tokens,
        base_s=p.base_s, per_seq_s=p.per_seq_s, per_kv_token_s=p.per_kv_token_s,
        prefill_per_token_s=p.prefill_per_token_s, prefix_cache=cfg.prefix_cache, prefill_step_s=p.prefill_step_s,
        front_end_s=p.front_end_s, front_end_quantiles_s=tuple(p.front_end_quantiles_s),
        front_end_cpu_s=p.front_end_cpu_s,
    )


class Stack:
    """Everything behind the HTTP layer."""

    def __init__(self, cfg: TestbedConfig, clock: Clock, engine_cls: type[Engine] = Engine,
                 replica_cls: type[Replica] = Replica) -> None:
        """``engine_cls``/``replica_cls``: the classes to build (the simulator's add decode jumps)."""
        self.cfg = cfg
        self.clock = clock
        self.profile = make_profile(cfg)
        # vLLM's request_queue_time / request_prefill_time histograms as (sum ns, count): observed once per
        # finished request that was scheduled (vllm/v1/metrics/stats.py), whatever its answer
        self.engine_times: dict[str, list[int]] = {"queue": [0, 0], "prefill": [0, 0]}
        fc = cfg.flow_control
        hr = cfg.headroom
        self.engine = engine_cls(
            engine_params(cfg), cfg.replicas, clock, cfg.speed, prefix_aware=self.profile.prefix_aware,
            headroom=(hr.h_max, hr.lam) if cfg.profile == "headroom" else None,
            queue_depth=fc.queue_depth_threshold, kv_threshold=fc.kv_cache_util_threshold,
            priority_preemption=self._sglang_preemption(cfg), replica_cls=replica_cls,
        )
        self.flow: FlowController | None = None
        self.revocations: Revocations | None = None  # llm-d demand-driven revocation (flow_control.revocation)
        # llm-d / GAIE with the flowControl feature gate off: legacy admission, no EPP queue
        self.legacy = self.profile.gateway and not fc.enabled
        if self.profile.gateway and fc.enabled:
            ttl = fc.ttl_s if fc.ttl_s is not None else (60.0 if cfg.profile == "llm-d" else None)
            self.flow = FlowController(fc, ttl / cfg.speed if ttl else None)
            if fc.no_endpoint_ttl_s:
                self.flow.no_endpoint_ttl_ns = int(fc.no_endpoint_ttl_s / cfg.speed * 1e9)
            self.engine.on_step = self.dispatch
            if fc.revocation:
                self.revocations = Revocations(int(fc.revocation_timeout_s / cfg.speed * 1e9))
                self.engine.on_step = self._on_step
        self.start_ns = clock.now_ns()
        self.ready_ns = self.start_ns + int(cfg.warmup_s / cfg.speed * 1e9)
        self.faults = FaultSchedule(cfg.speed, cfg.seed)
        for spec in cfg.faults:
            self.faults.add(spec, self.start_ns)
        self.replica_fault: list[str | None] = [None] * cfg.replicas
        self._rpm: dict[str, deque[int]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @staticmethod
    def _sglang_preemption(cfg: TestbedConfig) -> int | None:
        sg = cfg.sglang
        if cfg.profile != "sglang" or not sg.priority_scheduling or sg.disable_priority_preemption:
            return None
        return sg.priority_scheduling_preemption_threshold

    # ---- state ---------------------------------------------------------------------------
    def endpoints(self) -> int:
        """Replicas up (0 during warm-up)."""
        if self.clock.now_ns() < self.ready_ns:
            return 0
        return len(self.engine.up_replicas())

    def ready(self) -> bool:
        """Warm-up done and at least one replica up."""
        return self.endpoints() > 0

    def not_ready(self, rid: str) -> Reply:
        """The answer while warming up or with every replica down."""
        if self.legacy:
            assert isinstance(self.profile, EppProfile)
            return self.profile.no_candidates()
        return self.profile.not_ready(rid)

    # ---- admission ----------------------------------------------------------------------------
    def admit(self, job: Job, bypass_flow: bool = False) -> Reply | None:
        """Admit a job (queue or place it) or return the rejection to send now; ``bypass_flow``: a gateway that
        failed open sends it past flow control, straight to a replica."""
        now = self.clock.now_ns()
        prof = self.profile
        if self.flow is not None and not bypass_flow:
            kind = self.flow.enqueue(job, now, self.endpoints())
            if kind is not None:
                return prof.drop(kind, job.rid, False)
            self.dispatch()
            return None
        if not self.ready():
            return self.not_ready(job.rid)
        sat = self.engine.saturation()
        if self.legacy and job.priority < 0 and sat >= LEGACY_SATURATED:
            assert isinstance(prof, EppProfile)
            return prof.sheddable_dropped()
        if isinstance(prof, AnthropicProfile):
            lim = self.cfg.anthropic.rpm_limit
            if lim is not None and not self._rpm_take(job.tenant, lim, now):
                return prof.rate_limited(lim, self.retry_after_s(job.tenant), job.rid)
        if isinstance(prof, OpenAIProfile):
            lim = self.cfg.openai.rpm_limit
            if lim is not None and not self._rpm_take(job.tenant, lim, now):
                return prof.rate_limited(self.cfg.models[0], lim, job.rid)
            if job.rank >= 2.0 and sat >= self.cfg.openai.flex_saturation:
                return prof.flex_unavailable(job.rid)
        if isinstance(prof, AnthropicProfile) and sat >= self.cfg.anthropic.overload_saturation:
            return prof.overloaded(job.rid)
        replica = self.engine.place(job)
        assert replica is not None
        if self.cfg.profile == "vllm":
            lim = self.cfg.vllm.max_num_queued_reqs
            if lim is not None and replica.n_waiting + len(replica.running) >= lim:
                replica.front_end_arrival()  # refused by vLLM's front end, after its HTTP and tokenising
                return prof.drop(QUEUE_FULL, job.rid, False)
            lim = self.cfg.vllm.max_num_queued_tokens
            if lim is not None and replica.prefill_tokens_queued() >= lim:
                replica.front_end_arrival()
                return prof.drop(QUEUE_FULL, job.rid, False)
        if self.cfg.profile == "sglang":
            lim = self.cfg.sglang.max_queued_requests
            if lim is not None and replica.n_waiting >= lim:
                waiting = replica.waiting_jobs()
                worst = max(waiting, key=Job.order_key) if waiting else None
                if (self.cfg.sglang.priority_scheduling and worst is not None
                        and worst.order_key()[0] > job.rank):
                    # priority mode: the least-preferred waiter is aborted instead of the arrival
                    self.engine.remove(worst)
                    worst.sink.on_drop(worst, DISPLACED)
                else:
                    return prof.drop(QUEUE_FULL, job.rid, False)
        self.engine.submit(job, replica)
        return None

    def _rpm_take(self, key: str, limit: int, now: int) -> bool:
        window = int(60 / self.cfg.speed * 1e9)
        q = self._rpm.setdefault(key, deque())
        while q and now - q[0] >= window:
            q.popleft()
        if len(q) >= limit:
            return False
        q.append(now)
        return True

    def retry_after_s(self, key: str) -> int:
        """Whole seconds (wall clock) until the key's oldest request leaves the RPM window."""
        q = self._rpm.get(key)
        if not q:
            return 0
        left_ns = q[0] + int(60 / self.cfg.speed * 1e9) - self.clock.now_ns()
        return max(1, -(-left_ns // 1_000_000_000))

    def anthropic_rate_headers(self, key: str) -> dict[str, str]:
        """anthropic-ratelimit-requests-{limit,remaining,reset}; reset = RFC 3339 time the key's
        window is fully replenished (its newest request leaves the window)."""
        lim = self.cfg.anthropic.rpm_limit or 10_000
        q = self._rpm.get(key) or deque()
        now = self.clock.now_ns()
        window = int(60 / self.cfg.speed * 1e9)
        while q and now - q[0] >= window:
            q.popleft()
        left_s = max(0.0, (q[-1] + window - now) / 1e9) if q else 0.0
        reset = datetime.fromtimestamp(time.time() + left_s, tz=UTC).replace(microsecond=0)
        return {
            "anthropic-ratelimit-requests-limit": str(lim),
            "anthropic-ratelimit-requests-remaining": str(max(0, lim - len(q))),
            "anthropic-ratelimit-requests-reset": reset.isoformat().replace("+00:00", "Z"),
        }

    def rate_headers(self, key: str) -> dict[str, str]:
        """OpenAI x-ratelimit-* headers for a key."""
        lim = self.cfg.openai.rpm_limit or 10_000
        q = self._rpm.get(key) or deque()
        now = self.clock.now_ns()
        reset_ms = 0 if not q else max(0, int((q[0] + 60 / self.cfg.speed * 1e9 - now) / 1e6))
        tpm = self.cfg.openai.tpm_limit
        return {
            "x-ratelimit-limit-requests": str(lim),
            "x-ratelimit-remaining-requests": str(max(0, lim - len(q))),
            "x-ratelimit-reset-requests": f"{reset_ms}ms",
            "x-ratelimit-limit-tokens": str(tpm),
            "x-ratelimit-remaining-tokens": str(tpm),
            "x-ratelimit-reset-tokens": "0s",
        }

    def cancel(self, job: Job) -> bool:
        """The client went away: take the job out. True if it was still queued at the gateway."""
        if self.flow is not None and self.flow.cancel(job, self.clock.now_ns()):
            return True
        self.engine.remove(job)
        self.dispatch()
        return False

    # ---- dispatch and housekeeping ------------------------------------------------------------
    def dispatch(self) -> None:
        """Run one EPP dispatch cycle."""
        if self.flow is None or not self.flow.count:
            if self.revocations is not None:
                self.revocations.reclaim_target = 0  # nothing blocked
            return
        eng = self.engine

        def send(job: Job) -> None:
            r = eng.place(job)
            assert r is not None
            eng.submit(job, r)

        self.flow.dispatch_cycle(eng.saturated, self.endpoints(), send, self.clock.now_ns())
        if self.cfg.flow_control.enable_eviction and self.flow.count:
            self._evict(send)
        if self.revocations is not None:
            self._revoke(send)

    def _on_step(self) -> None:
        """After replica steps (revocation on): confirm revocations whose replica stepped, then dispatch."""
        self.settle_revocations()
        self.dispatch()

    def settle_revocations(self) -> None:
        """Confirm or time out pending revocations (a replica's step after the revocation confirms it)."""
        rv = self.revocations
        if rv is None or not rv.pending:
            return
        reps = self.engine.replicas
        rv.settle(self.clock.now_ns(), lambda i: reps[i].steps_total if reps[i].up else None)

    def _revoke(self, send: Callable[[Job], None]) -> None:
        """llm-d demand-driven revocation (PR #2249): requests of priority >= 0 wait in a band because the pool
        is saturated → revoke RUNNING requests of priority < 0, lowest priority first, then the youngest, one per
        blocked request not already covered by a pending (unconfirmed) revocation, while the pool stays
        saturated. The victim's client gets 429 ``evicted`` before any byte, or its stream is cut."""
        flow, eng, rv = self.flow, self.engine, self.revocations
        assert flow is not None and rv is not None
        ceiling = self.cfg.flow_control.saturation_ceiling
        blocked = flow.blocked()
        if not blocked or self.endpoints() == 0 or not eng.saturated(ceiling):
            rv.reclaim_target = 0
            return
        need = rv.demand(blocked)
        if need <= 0:
            return
        victims = sorted((j for r in eng.replicas if r.up for j in r.running
                          if j.state == RUNNING and j.priority < 0),
                         key=lambda j: (j.priority, -j.arrival_ns, -j.seq))
        now = self.clock.now_ns()
        revoked = 0
        for victim in victims:
            if revoked >= need or not eng.saturated(ceiling):
                break
            assert victim.replica is not None
            rv.issue(victim, now, victim.replica, eng.replicas[victim.replica].steps_total)
            eng.remove(victim)
            victim.sink.on_drop(victim, EVICTED)
            revoked += 1
        if revoked:
            flow.dispatch_cycle(eng.saturated, self.endpoints(), send, self.clock.now_ns())

    def _evict(self, send: Callable[[Job], None]) -> None:
        """llm-d enableEviction: while a band is gated (saturation >= ceiling) with work queued, kill
        in-flight priority<0 requests of a lower priority, one per queued request at most. Victim: the
        lowest priority, then the most recently dispatched (the least work lost: assumed)."""
        flow, eng = self.flow, self.engine
        assert flow is not None
        ceiling = self.cfg.flow_control.saturation_ceiling
        top = max((p for p, b in flow.bands.items() if b.count), default=None)
        if top is None or eng.saturation() < ceiling:
            return
        victims = sorted((j for j in eng.in_flight() if j.priority < 0 and j.priority < top),
                         key=lambda j: (j.priority, -(j.dispatch_ns or 0), -j.seq))
        evicted = 0
        for victim in victims:
            if eng.saturation() < ceiling:
                break
            if sum(b.count for p, b in flow.bands.items() if p > victim.priority) <= evicted:
                continue
            evicted += 1
            eng.remove(victim)
            flow.outcomes[victim.priority, EVICTED_OTHER] += 1
            victim.sink.on_drop(victim, EVICTED)
        flow.dispatch_cycle(eng.saturated, self.endpoints(), send, self.clock.now_ns())

    def sweep_ttl(self) -> None:
        """Expire queued requests past their TTL."""
        if self.flow is None:
            return
        for job, kind in self.flow.expire(self.clock.now_ns(), self.endpoints()):
            job.sink.on_drop(job, kind)

    def sweep_waiting_timeout(self) -> None:
        """SGLang: abort requests that waited on a replica longer than waiting_timeout_s."""
        t = self.cfg.sglang.waiting_timeout_s
        if self.cfg.profile != "sglang" or not t:
            return
        limit = int(t / self.cfg.speed * 1e9)
        now = self.clock.now_ns()
        for r in self.engine.replicas:
            for job in r.waiting_jobs():
                if job.state == WAITING and job.scheduled_ns is None and now - job.enqueue_ns >= limit:
                    r.remove(job)
                    job.sink.on_drop(job, WAITING_TIMEOUT)

    def apply_faults(self) -> None:
        """Bring replicas down/up and set slow factors from the fault schedule."""
        now = self.clock.now_ns()
        for r in self.engine.replicas:
            up, factor, name = self.faults.replica_state(r.index, now)
            self.replica_fault[r.index] = name
            r.slow_factor = factor
            if up != r.up:
                self.engine.set_up(r.index, up)
        self.dispatch()

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start replica loops and the housekeeping tasks."""
        self.engine.start()
        self._tasks.append(asyncio.create_task(self._every(TICK_S, self._tick)))
        if self.flow is not None:
            self._tasks.append(asyncio.create_task(
                self._every(self.cfg.flow_control.sweep_interval_s, self.sweep_ttl)))

    def _tick(self) -> None:
        self.settle_revocations()  # a replica that stopped stepping (down) lets its revocations time out
        self.apply_faults()
        self.sweep_waiting_timeout()
        if self.flow is not None:
            self.dispatch()  # warm-up end or a replica back up

    async def _every(self, period_s: float, fn: object) -> None:
        assert callable(fn)
        while True:
            await asyncio.sleep(period_s / self.cfg.speed)
            fn()

    async def stop(self) -> None:
        """Stop every task."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        await self.engine.stop()

    def observe_finished(self, job: Job) -> None:
        """A request ended: its engine queue (dispatch → scheduled) and prefill (→ first token), as vLLM counts."""
        if job.dispatch_ns is None or job.scheduled_ns is None:
            return
        queue = self.engine_times["queue"]
        queue[0] += job.scheduled_ns - job.dispatch_ns
        queue[1] += 1
        if job.first_token_ns is not None:
            prefill = self.engine_times["prefill"]
            prefill[0] += job.first_token_ns - job.scheduled_ns
            prefill[1] += 1
