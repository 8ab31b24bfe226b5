"""Simulated GPU replicas with continuous batching, KV capacity, preemption and a prefix cache."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from rushhour.testbed.clock import Clock
from rushhour.testbed.job import DONE, REPLICA_DOWN, RUNNING, WAITING, Job
from rushhour.testbed.policies import (
    ReplicaView,
    endpoint_saturation,
    freeness,
    pick_replica,
    pick_victim,
)
from rushhour.testbed.prefix_cache import PrefixCache

JOB_ORDER_KEY = attrgetter("key")  # Job.key, cached order_key() (set when the job enters a replica)
TIMER_SLACK_S = 0.0005  # uvloop timers are whole milliseconds: a step due within this is fired now
DRAIN_MAX_S = 0.02  # the token drain yields to the event loop after at most this much work
MAX_CATCH_UP_S = 0.05  # a step fired later than this does not make the next one fire early


@dataclass
class EngineParams:
    """Per-replica capacity and step-time model (see presets.py)."""

    max_num_seqs: int
    kv_capacity_tokens: int
    max_num_batched_tokens: int
    block_tokens: int
    base_s: float
    per_seq_s: float
    per_kv_token_s: float
    prefill_per_token_s: float
    prefix_cache: bool = True
    prefill_step_s: float = 0.0  # once for a step holding any prompt chunk (a calibrated engine's; 0 = none)
    # a calibrated server's time before its engine queues a request (HTTP, tokenising, hand-offs): the simulator
    # delays each request's arrival at the engine by it (the testbed's own HTTP server has its own); 0 = none
    front_end_s: float = 0.0
    # that time's quantiles (evenly spaced, 0 % to 100 %): the simulator draws each request's from them; () = none
    front_end_quantiles_s: tuple[float, ...] = ()
    # a calibrated server's front-end CPU per arriving request (served or refused) on the engine's own core: an
    # arrival while the engine is busy makes its next step this much longer (vLLM on one core: the API server's
    # HTTP, template and tokenising take the core from the engine core's step); 0 = a front end on cores of its own
    front_end_cpu_s: float = 0.0


class Replica:
    """One model server: a waiting heap, a running batch and a step function."""

    def __init__(self, index: int, params: EngineParams, clock: Clock) -> None:
        self.index = index
        self.p = params
        self.clock = clock
        self.waiting: list[tuple[tuple[float, int, int], Job]] = []  # heap on job.order_key()
        self.n_waiting = 0  # live entries (cancelled ones stay in the heap until popped)
        self.running: list[Job] = []
        self.up = True
        self.slow_factor = 1.0
        self.cache = PrefixCache(params.kv_capacity_tokens // params.block_tokens)
        self.preemptions_total = 0
        self.prefix_hits_total = 0
        self.prefix_queries_total = 0
        self.steps_total = 0
        self.kv = 0  # KV tokens held by running requests: always sum(j.computed for j in running)
        # SGLang priority preemption: a waiter that does not fit preempts running requests whose rank is
        # worse by more than this (None = off)
        self.priority_preemption: int | None = None
        self._plan: dict[Job, int] = {}  # the planned step: job -> tokens to compute
        self.front_debt_s = 0.0  # front-end CPU taken from the engine's core since the last planned step

    # ---- state views -------------------------------------------------------------------
    def kv_used(self) -> int:
        """KV tokens held by running requests (kept incrementally, O(1))."""
        return self.kv

    def kv_usage(self) -> float:
        """Fraction of KV capacity in use (vllm:kv_cache_usage_perc)."""
        return self.kv / self.p.kv_capacity_tokens

    def busy(self) -> bool:
        """True if a step has work to do."""
        return bool(self.running) or self.n_waiting > 0

    def front_end_arrival(self) -> None:
        """A request reached this replica's front end: with the engine busy, its CPU lengthens the next step."""
        if self.p.front_end_cpu_s and (self.running or self.n_waiting):
            self.front_debt_s += self.p.front_end_cpu_s

    def prefill_tokens_queued(self) -> int:
        """Prompt tokens of the requests here before their first token (vLLM's ``get_num_queued_tokens``: the
        whole prompt, chunks already computed and cache hits not subtracted)."""
        return (sum(j.prompt_tokens for j in self.waiting_jobs())
                + sum(j.prompt_tokens for j in self.running if j.first_token_ns is None))

    def tiers_present(self) -> set[int]:
        """Headroom tiers of the requests placed here."""
        return {j.tier for j in self.running} | {j.tier for _, j in self.waiting if j.state == WAITING}

    # ---- queue ops ---------------------------------------------------------------------
    def add(self, job: Job, now: int) -> None:
        """Put a job in this replica's waiting queue."""
        job.state = WAITING
        job.replica = self.index
        job.enqueue_ns = now
        job.key = job.order_key()
        heapq.heappush(self.waiting, (job.key, job))
        self.n_waiting += 1

    def _peek_waiting(self) -> Job | None:
        while self.waiting and self.waiting[0][1].state != WAITING:
            heapq.heappop(self.waiting)  # drop lazily-removed entries
        return self.waiting[0][1] if self.waiting else None

    def waiting_jobs(self) -> list[Job]:
        """Live waiting jobs (unordered)."""
        return [j for _, j in self.waiting if j.state == WAITING and j.replica == self.index]

    def remove(self, job: Job) -> None:
        """Take a job out of this replica wherever it is (cancel, abort)."""
        if job.state == WAITING:
            self.n_waiting -= 1
        elif job.state == RUNNING and job in self.running:
            self.running.remove(job)
            self.kv -= job.computed
        job.state = DONE

    def drain(self) -> list[Job]:
        """Remove and return every job here (replica going down)."""
        jobs = list(self.running) + self.waiting_jobs()
        for j in jobs:
            self.remove(j)
        self.waiting.clear()
        self.n_waiting = 0
        return jobs

    # ---- the step ------------------------------------------------------------------------
    def preempt(self, victim: Job) -> None:
        """Put a running job back to waiting (a seam: the simulator's replica settles its lazy jobs first)."""
        # vLLM V1 recompute preemption: free the KV, back to waiting, keep what was streamed
        self.running.remove(victim)
        self.kv -= victim.computed
        victim.computed = 0
        victim.preemptions += 1
        self.preemptions_total += 1
        victim.state = WAITING
        heapq.heappush(self.waiting, (victim.key, victim))
        self.n_waiting += 1

    def _may_preempt_for(self, job: Job) -> bool:
        """True if SGLang priority preemption could free a slot for `job` (a victim exists)."""
        thr = self.priority_preemption
        return thr is not None and any(r.state == RUNNING and r.rank - job.rank > thr for r in self.running)

    def _priority_preempt(self, job: Job, need_kv: int, plan: dict[Job, int]) -> tuple[int, int] | None:
        """SGLang `preempt_to_schedule`: free a slot and `need_kv` KV tokens for `job` by preempting running
        requests whose priority is worse by more than the threshold (least urgent first, then the latest
        to enter the queue); all or nothing. The victims go back to waiting (recompute), as SGLang
        re-queues its preempt_list. Returns (KV tokens freed incl. planned chunks, budget freed)."""
        thr = self.priority_preemption
        assert thr is not None
        chosen: list[Job] = []
        free = 0
        for r in sorted(self.running, key=lambda r: (-r.rank, -r.enqueue_ns)):
            if r.state != RUNNING or r.rank - job.rank <= thr:
                break
            chosen.append(r)
            free += r.computed + plan.get(r, 0)
            if free >= need_kv:
                break
        if not chosen or free < need_kv:
            return None
        kv_freed = budget_freed = 0
        for r in chosen:
            c = plan.pop(r, 0)
            kv_freed += r.computed + c
            budget_freed += c
            self.preempt(r)
        return kv_freed, budget_freed

    def plan_step(self, now: int) -> float | None:
        """Choose this step's batch (preempting if KV runs out); returns its duration in s, or None."""
        plan: dict[Job, int] = {}
        kv, budget, preempted = self._plan_running(plan)
        kv = self._admit(plan, kv, budget, preempted, now)
        self._plan = plan
        if not plan:
            return None
        return self._duration(plan, kv)

    def _plan_running(self, plan: dict[Job, int]) -> tuple[int, int, bool]:
        """The running jobs' chunks, most urgent first, from the step's token budget, preempting while KV runs
        out; returns (KV after them, budget left, whether it preempted)."""
        p = self.p
        cap = p.kv_capacity_tokens
        budget = p.max_num_batched_tokens
        kv = self.kv
        preempted = False
        running = self.running
        for job in sorted(running, key=JOB_ORDER_KEY) if len(running) > 1 else list(running):
            if job.state != RUNNING:
                continue
            chunk = job.prompt_tokens + job.output - job.computed
            if chunk > budget:
                chunk = budget
            if chunk <= 0:
                continue
            while kv + chunk > cap and job.state == RUNNING:
                victim = pick_victim(running)
                kv -= victim.computed
                budget += plan.pop(victim, 0)
                self.preempt(victim)
                preempted = True
            if job.state != RUNNING:
                continue
            plan[job] = chunk
            kv += chunk
            budget -= chunk
        return kv, budget, preempted

    def _admit(self, plan: dict[Job, int], kv: int, budget: int, preempted: bool, now: int) -> int:
        """Admit waiting jobs into the step while budget, slots and KV allow; returns the KV after them."""
        p = self.p
        cap = p.kv_capacity_tokens
        running = self.running
        # vLLM admits no new request in a step that had to preempt
        while not preempted and budget > 0 and (len(running) < p.max_num_seqs
                                                 or self.priority_preemption is not None):
            nxt = self._peek_waiting()
            if nxt is None:
                break
            job = nxt
            if len(running) >= p.max_num_seqs and not self._may_preempt_for(job):
                break
            hit = self.cache.match(job.blocks) if p.prefix_cache else 0
            cached = min(hit * p.block_tokens, job.prompt_tokens - 1)
            need = job.prompt_tokens + job.output - cached
            chunk = min(need, budget)
            full = len(running) >= p.max_num_seqs
            if full or kv + cached + chunk > cap:
                freed = None
                if self.priority_preemption is not None:
                    freed = self._priority_preempt(job, max(0, kv + cached + chunk - cap), plan)
                if freed is None:
                    break
                kv -= freed[0]
                budget += freed[1]
            heapq.heappop(self.waiting)
            self.n_waiting -= 1
            if job.scheduled_ns is None:
                job.scheduled_ns = now
                job.cached_tokens = cached
                self.prefix_queries_total += job.prompt_tokens
                self.prefix_hits_total += cached
            job.state = RUNNING
            job.computed = cached
            self.kv += cached
            running.append(job)
            plan[job] = chunk
            kv += cached + chunk
            budget -= chunk
        return kv

    def _duration(self, plan: dict[Job, int], kv: int, decode: int = 0) -> float:
        """The step's duration in s: ``decode`` decoding jobs besides the plan's (the simulator's lazy ones)."""
        p = self.p
        prefill = 0
        for c in plan.values():
            if c == 1:
                decode += 1
            else:
                prefill += c
        dur = p.base_s + p.per_seq_s * decode + p.per_kv_token_s * kv + p.prefill_per_token_s * prefill
        if prefill:  # a real engine's prefill step costs more than its tokens (vLLM on CPU: another attention path)
            dur += p.prefill_step_s
        if self.front_debt_s:  # the front end's CPU on the same core since the last step: it serialises with it
            dur += self.front_debt_s
            self.front_debt_s = 0.0
        return dur * self.slow_factor

    def _token(self, job: Job, computed: int, now: int) -> None:
        """The job's next token, its KV being there: the first one is stamped, the last one retires the job."""
        n = job.output + 1
        job.output = n
        if job.first_token_ns is None:
            job.first_token_ns = now
        if n >= job.max_tokens:
            self.running.remove(job)
            self.kv -= computed
            job.state = DONE
            job.end_ns = now

    def finish_step(self, now: int, out: list[Job] | None = None) -> None:
        """Apply the planned step: advance KV, emit tokens, retire finished requests.

        Each job that got a token is reported to its sink, or appended to `out` when given (the
        engine's scheduler then notifies the sinks itself, after every due step has fired; a job that
        finished has `end_ns` set and gets on_token then on_finish)."""
        self.steps_total += 1
        plan = self._plan
        self._plan = {}
        idx = self.index
        pc = self.p.prefix_cache
        free_blocks = None
        for job, chunk in plan.items():
            if job.state != RUNNING or job.replica != idx:
                continue  # cancelled or preempted meanwhile
            before = job.computed
            computed = before + chunk
            job.computed = computed
            self.kv += chunk
            prompt = job.prompt_tokens
            if before < prompt <= computed and pc and job.blocks:
                if free_blocks is None:
                    free_blocks = (self.p.kv_capacity_tokens - self.kv) // self.p.block_tokens
                self.cache.insert(job.blocks, free_blocks + len(job.blocks))
            if computed >= prompt + job.output:
                self._token(job, computed, now)
                if out is not None:
                    out.append(job)
                else:
                    job.sink.on_token(job)
                    if job.end_ns is not None:
                        job.sink.on_finish(job)


class Engine:
    """A pool of replicas: placement, admission limits and the per-replica step timers."""

    def __init__(self, params: EngineParams, replicas: int, clock: Clock, speed: float = 1.0,
                 prefix_aware: bool = False, headroom: tuple[float, float] | None = None,
                 queue_depth: float = 5.0, kv_threshold: float = 0.8,
                 priority_preemption: int | None = None, replica_cls: type[Replica] = Replica) -> None:
        self.params = params
        self.clock = clock
        self.speed = speed
        self.prefix_aware = prefix_aware
        self.headroom = headroom  # (h_max, lambda) when placement uses freeness with headroom
        self.queue_depth = queue_depth
        self.kv_threshold = kv_threshold
        # replica_cls: the simulator's subclass (its decode jumps)
        self.replicas = [replica_cls(i, params, clock) for i in range(replicas)]
        for r in self.replicas:
            r.priority_preemption = priority_preemption
        self.on_step: Callable[[], None] = lambda: None  # flow control re-runs its dispatch cycle
        # a virtual-time driver (sim/) plans and fires the steps itself: wake goes to it, not to asyncio
        self.waker: Callable[[int], None] | None = None
        self._seq = itertools.count()
        # ---- the step scheduler: one timer for every replica (times are time.monotonic() seconds)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: list[float | None] = [None] * replicas  # next step's due time; None = idle
        self._heap: list[tuple[float, int]] = []  # (due, replica); stale entries skipped lazily
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._woken: set[int] = set()
        self._wake_handle: asyncio.Handle | None = None
        # tokens of fired steps not yet handed to their sinks: (due, jobs) per step, oldest first
        self._pending: deque[tuple[float, list[Job]]] = deque()
        self._pos = 0  # index into the oldest pending step's jobs
        self._drain_handle: asyncio.Handle | None = None
        # step lag: how late each step fired (scheduler fire time - due time), for /admin/stats
        self.lag_s: deque[float] = deque(maxlen=20_000)
        # write lag: due time -> the step's last token handed to its socket (sink notified)
        self.write_lag_s: deque[float] = deque(maxlen=20_000)

    # ---- views -------------------------------------------------------------------------
    def up_replicas(self) -> list[Replica]:
        """Replicas currently serving."""
        return [r for r in self.replicas if r.up]

    def endpoint_scores(self) -> list[float]:
        """Saturation score of each up replica."""
        return [endpoint_saturation(r.n_waiting, r.kv_usage(), self.queue_depth, self.kv_threshold)
                for r in self.up_replicas()]

    def saturation(self) -> float:
        """Pool saturation as llm-d's utilization detector computes it (``pool_saturation`` of
        ``endpoint_scores``, inlined: flow control asks at every dispatch cycle)."""
        qd, kt = self.queue_depth, self.kv_threshold
        scores = [w if w >= k else k  # max(w, k), as endpoint_saturation
                  for w, k in ((r.n_waiting / qd, r.kv_usage() / kt) for r in self.replicas if r.up)]
        return sum(scores) / len(scores) if scores else 1.0

    def saturated(self, threshold: float) -> bool:
        """``saturation() >= threshold`` (flow control's gate asks only this)."""
        return self.saturation() >= threshold

    def in_flight(self) -> list[Job]:
        """Every job placed on an up replica (waiting there or running)."""
        out: list[Job] = []
        for r in self.replicas:
            out.extend(j for j in r.running if j.state == RUNNING)
            out.extend(r.waiting_jobs())
        return out

    def place(self, job: Job) -> Replica | None:
        """Choose the replica for a job (None when every replica is down)."""
        views = []
        for r in self.up_replicas():
            hit = 0.0
            if self.prefix_aware and job.blocks:
                hit = r.cache.known(job.blocks) / len(job.blocks)
            free = 0.0
            if self.headroom is not None:
                h_max, lam = self.headroom
                free = freeness(r.p.kv_capacity_tokens, r.kv_used(), r.tiers_present() | {job.tier},
                                len(r.running) + r.n_waiting, h_max, lam)
            load = (r.n_waiting + len(r.running)) / r.p.max_num_seqs
            views.append(ReplicaView(r.index, load, hit, free))
        idx = pick_replica(views, self.prefix_aware, self.headroom is not None)
        return None if idx is None else self.replicas[idx]

    # ---- operations ------------------------------------------------------------------------
    def submit(self, job: Job, replica: Replica) -> None:
        """Hand a job to a replica's waiting queue and wake its step timer."""
        now = self.clock.now_ns()
        job.seq = next(self._seq)
        if job.dispatch_ns is None:
            job.dispatch_ns = now
        replica.front_end_arrival()
        replica.add(job, now)
        job.sink.on_dispatch(job)
        self.wake(replica.index)

    def remove(self, job: Job) -> None:
        """Take a job out of its replica (client gone, timeout, displacement)."""
        if job.replica is not None:
            self.replicas[job.replica].remove(job)

    def set_up(self, index: int, up: bool) -> list[Job]:
        """Bring a replica down (its jobs are dropped and returned) or back up."""
        r = self.replicas[index]
        dropped: list[Job] = []
        if not up and r.up:
            dropped = r.drain()
            for j in dropped:
                j.sink.on_drop(j, REPLICA_DOWN)
        r.up = up
        if up:
            self.wake(index)
        return dropped

    def wake(self, index: int) -> None:
        """Plan an idle replica's next step (on the next loop iteration, so a burst of submits shares it)."""
        if self.waker is not None:
            self.waker(index)
            return
        if self._loop is None or self._due[index] is not None:
            return
        self._woken.add(index)
        if self._wake_handle is None:
            self._wake_handle = self._loop.call_soon(self._plan_woken)

    # ---- the scheduler ------------------------------------------------------------------------
    # One timer drives every replica. When it fires, every step that is due fires in due order:
    # finish_step applies the step to the simulated state (KV, token counts, retirements), flow
    # control runs one dispatch cycle, then each fired replica plans its next step, whose due time is
    # the previous due time + its duration (absolute targets, so lag never accumulates). Tokens are
    # handed to the sinks (socket writes) afterwards by a drain that fires steps falling due meanwhile
    # inline, so a burst of writes never holds back the next due step (see _drain).
    def start(self) -> None:
        """Start the step scheduler on the running event loop."""
        self._loop = asyncio.get_running_loop()
        for r in self.replicas:
            self.wake(r.index)

    async def stop(self) -> None:
        """Stop the scheduler (pending timers and drains are dropped)."""
        for h in (self._timer, self._wake_handle, self._drain_handle):
            if h is not None:
                h.cancel()
        self._timer = self._wake_handle = self._drain_handle = None
        self._timer_at = float("inf")
        self._loop = None
        self._pending.clear()
        self._pos = 0

    def _plan_woken(self) -> None:
        self._wake_handle = None
        woken, self._woken = self._woken, set()
        now = time.monotonic()
        for i in sorted(woken):
            if self._due[i] is None:
                self._plan(self.replicas[i], now, now)
        self._arm()

    def _plan(self, r: Replica, base: float, now: float) -> None:
        """Plan r's next step from `base` (its previous due time, or now when it was idle)."""
        due = None
        if r.up and r.busy():
            dur = r.plan_step(self.clock.now_ns())
            if dur is not None:  # None: work exists but none fits (waits on KV): idle until woken
                due = max(base, now - MAX_CATCH_UP_S) + dur / self.speed
                heapq.heappush(self._heap, (due, r.index))
        self._due[r.index] = due

    def _arm(self) -> None:
        heap, due = self._heap, self._due
        while heap and due[heap[0][1]] != heap[0][0]:
            heapq.heappop(heap)  # stale entry
        if not heap or self._loop is None:
            return
        at = heap[0][0]
        if at < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = at
            self._timer = self._loop.call_later(max(0.0, at - time.monotonic()), self._fire)

    def _fire(self) -> None:
        """The timer callback: fire due steps, then hand their tokens to the sinks."""
        self._timer = None
        self._timer_at = float("inf")
        self._step_due()
        if self._pending and self._drain_handle is None:
            self._drain()

    def _step_due(self) -> None:
        """Fire every step that is due (in due order), run one dispatch cycle, plan the next steps."""
        now = time.monotonic()
        heap, due = self._heap, self._due
        fired: list[tuple[Replica, float]] = []
        while heap and heap[0][0] <= now + TIMER_SLACK_S:
            at, i = heapq.heappop(heap)
            if due[i] != at:
                continue  # stale
            due[i] = None
            fired.append((self.replicas[i], at))
        if fired:
            now_ns = self.clock.now_ns()
            lag = self.lag_s
            mono = time.monotonic
            for r, at in fired:
                t = mono()  # this replica's own fire time (earlier ones in the batch count against it)
                lag.append(t - at if t > at else 0.0)
                if r.up:
                    jobs: list[Job] = []
                    r.finish_step(now_ns, jobs)
                    if jobs:
                        self._pending.append((at, jobs))
            self.on_step()
            for r, at in fired:
                if due[r.index] is None:
                    self._plan(r, at, now)
        self._arm()

    def _drain(self) -> None:
        """Notify sinks of fired steps' tokens, oldest step first.

        Token delivery outranks everything but the steps themselves: a step that falls due meanwhile
        is fired inline (checked every 32 writes), and the drain yields to the event loop (new
        requests, disconnects) only once it has caught up or after DRAIN_MAX_S of work."""
        self._drain_handle = None
        pending, heap = self._pending, self._heap
        clock = time.monotonic
        stop_at = clock() + DRAIN_MAX_S
        pos = self._pos
        n = 0
        while pending:
            at, jobs = pending[0]
            end = len(jobs)
            while pos < end:
                job = jobs[pos]
                pos += 1
                sink = job.sink
                sink.on_token(job)
                if job.end_ns is not None:
                    sink.on_finish(job)
                n += 1
                if n & 31 == 0:
                    now = clock()
                    if heap and heap[0][0] <= now:  # checked every ~0.3 ms: no timer slack needed
                        if self._timer is not None:
                            self._timer.cancel()
                            self._timer = None
                            self._timer_at = float("inf")
                        self._step_due()  # appends to `pending`; pending[0] and pos stay valid
                    if now > stop_at:
                        break
            if pos >= end:
                pending.popleft()
                pos = 0
                self.write_lag_s.append(max(0.0, clock() - at))
            elif clock() > stop_at:
                break
        self._pos = pos
        if pending and self._loop is not None:
            self._drain_handle = self._loop.call_soon(self._drain)
