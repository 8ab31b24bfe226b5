"""Simulated GPU replicas with continuous batching, KV capacity, preemption and a prefix cache."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from testbed.clock import Clock
from testbed.job import DONE, REPLICA_DOWN, RUNNING, WAITING, Job
from testbed.policies import (
    ReplicaView,
    endpoint_saturation,
    freeness,
    pick_replica,
    pick_victim,
    pool_saturation,
)
from testbed.prefix_cache import PrefixCache


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
        self._plan: list[tuple[Job, int]] = []

    # ---- state views -------------------------------------------------------------------
    def kv_used(self) -> int:
        """KV tokens held by running requests."""
        return sum(j.computed for j in self.running)

    def kv_usage(self) -> float:
        """Fraction of KV capacity in use (vllm:kv_cache_usage_perc)."""
        return self.kv_used() / self.p.kv_capacity_tokens

    def busy(self) -> bool:
        """True if a step has work to do."""
        return bool(self.running) or self.n_waiting > 0

    def tiers_present(self) -> set[int]:
        """Headroom tiers of the requests placed here."""
        return {j.tier for j in self.running} | {j.tier for _, j in self.waiting if j.state == WAITING}

    # ---- queue ops ---------------------------------------------------------------------
    def add(self, job: Job, now: int) -> None:
        """Put a job in this replica's waiting queue."""
        job.state = WAITING
        job.replica = self.index
        job.enqueue_ns = now
        heapq.heappush(self.waiting, (job.order_key(), job))
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
    def _preempt(self, victim: Job) -> None:
        # vLLM V1 recompute preemption: free the KV, back to waiting, keep what was streamed
        self.running.remove(victim)
        victim.computed = 0
        victim.preemptions += 1
        self.preemptions_total += 1
        victim.state = WAITING
        heapq.heappush(self.waiting, (victim.order_key(), victim))
        self.n_waiting += 1

    def plan_step(self, now: int) -> float | None:
        """Choose this step's batch (preempting if KV runs out); returns its duration in s, or None."""
        p = self.p
        budget = p.max_num_batched_tokens
        kv = self.kv_used()
        plan: dict[Job, int] = {}
        preempted = False
        for job in sorted(self.running, key=Job.order_key):
            if job.state != RUNNING:
                continue
            chunk = min(job.prompt_tokens + job.output - job.computed, budget)
            if chunk <= 0:
                continue
            while kv + chunk > p.kv_capacity_tokens and job.state == RUNNING:
                victim = pick_victim(self.running)
                kv -= victim.computed
                budget += plan.pop(victim, 0)
                self._preempt(victim)
                preempted = True
            if job.state != RUNNING:
                continue
            plan[job] = chunk
            kv += chunk
            budget -= chunk
        # vLLM admits no new request in a step that had to preempt
        while not preempted and budget > 0 and len(self.running) < p.max_num_seqs:
            nxt = self._peek_waiting()
            if nxt is None:
                break
            job = nxt
            hit = self.cache.match(job.blocks) if p.prefix_cache else 0
            cached = min(hit * p.block_tokens, job.prompt_tokens - 1)
            need = job.prompt_tokens + job.output - cached
            chunk = min(need, budget)
            if kv + cached + chunk > p.kv_capacity_tokens:
                break
            heapq.heappop(self.waiting)
            self.n_waiting -= 1
            if job.scheduled_ns is None:
                job.scheduled_ns = now
                job.cached_tokens = cached
                self.prefix_queries_total += job.prompt_tokens
                self.prefix_hits_total += cached
            job.state = RUNNING
            job.computed = cached
            self.running.append(job)
            plan[job] = chunk
            kv += cached + chunk
            budget -= chunk
        if not plan:
            self._plan = []
            return None
        self._plan = list(plan.items())
        decode = sum(1 for c in plan.values() if c == 1)
        prefill = sum(c for c in plan.values() if c > 1)
        dur = p.base_s + p.per_seq_s * decode + p.per_kv_token_s * kv + p.prefill_per_token_s * prefill
        return dur * self.slow_factor

    def finish_step(self, now: int) -> None:
        """Apply the planned step: advance KV, emit tokens, retire finished requests."""
        self.steps_total += 1
        free_blocks = None
        for job, chunk in self._plan:
            if job.state != RUNNING or job.replica != self.index:
                continue  # cancelled or preempted meanwhile
            before = job.computed
            job.computed += chunk
            if before < job.prompt_tokens <= job.computed and self.p.prefix_cache and job.blocks:
                if free_blocks is None:
                    free_blocks = (self.p.kv_capacity_tokens - self.kv_used()) // self.p.block_tokens
                self.cache.insert(job.blocks, free_blocks + len(job.blocks))
            if job.computed >= job.prompt_tokens + job.output:
                job.output += 1
                if job.first_token_ns is None:
                    job.first_token_ns = now
                if job.output >= job.max_tokens:
                    self.running.remove(job)
                    job.state = DONE
                    job.end_ns = now
                    job.sink.on_token(job)
                    job.sink.on_finish(job)
                else:
                    job.sink.on_token(job)
        self._plan = []


class Engine:
    """A pool of replicas: placement, admission limits and the per-replica step timers."""

    def __init__(self, params: EngineParams, replicas: int, clock: Clock, speed: float = 1.0,
                 prefix_aware: bool = False, headroom: tuple[float, float] | None = None,
                 queue_depth: float = 5.0, kv_threshold: float = 0.8) -> None:
        self.params = params
        self.clock = clock
        self.speed = speed
        self.prefix_aware = prefix_aware
        self.headroom = headroom  # (h_max, lambda) when placement uses freeness with headroom
        self.queue_depth = queue_depth
        self.kv_threshold = kv_threshold
        self.replicas = [Replica(i, params, clock) for i in range(replicas)]
        self.on_step: Callable[[], None] = lambda: None  # flow control re-runs its dispatch cycle
        self._seq = itertools.count()
        self._wake: list[asyncio.Event] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.lag_s: deque[float] = deque(maxlen=20_000)  # step timer lateness, for the benchmark

    # ---- views -------------------------------------------------------------------------
    def up_replicas(self) -> list[Replica]:
        """Replicas currently serving."""
        return [r for r in self.replicas if r.up]

    def endpoint_scores(self) -> list[float]:
        """Saturation score of each up replica."""
        return [endpoint_saturation(r.n_waiting, r.kv_usage(), self.queue_depth, self.kv_threshold)
                for r in self.up_replicas()]

    def saturation(self) -> float:
        """Pool saturation as llm-d's utilization detector computes it."""
        return pool_saturation(self.endpoint_scores())

    def place(self, job: Job) -> Replica | None:
        """Choose the replica for a job (None when every replica is down)."""
        views = []
        for r in self.up_replicas():
            hit = 0.0
            if self.prefix_aware and job.blocks:
                hit = r.cache.match(job.blocks, touch=False) / len(job.blocks)
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
        """Wake a replica's step loop if it sleeps idle."""
        if index < len(self._wake):
            self._wake[index].set()

    # ---- async driver ---------------------------------------------------------------------
    def start(self) -> None:
        """Start one step loop per replica on the running event loop."""
        self._wake = [asyncio.Event() for _ in self.replicas]
        self._tasks = [asyncio.create_task(self._loop(r)) for r in self.replicas]

    async def stop(self) -> None:
        """Cancel the step loops."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []

    async def _loop(self, r: Replica) -> None:
        # one timer per replica step (never per token); targets are absolute so lag never accumulates
        loop = asyncio.get_running_loop()
        wake = self._wake[r.index]
        target = loop.time()
        while True:
            if not r.up or not r.busy():
                wake.clear()
                await wake.wait()
                target = loop.time()
                continue
            dur = r.plan_step(self.clock.now_ns())
            if dur is None:
                # work exists but none fits (waits on KV): idle until something changes
                wake.clear()
                await wake.wait()
                target = loop.time()
                continue
            target = max(target, loop.time() - 0.05) + dur / self.speed
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            self.lag_s.append(max(0.0, loop.time() - target))
            if r.up:
                r.finish_step(self.clock.now_ns())
            self.on_step()
