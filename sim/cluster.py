"""The testbed's stack (profiles, flow control, replicas, faults) driven by the virtual clock.

``testbed.stack.Stack`` is used as it is; only its timers change: the engine's asyncio step scheduler
is replaced by step events on the loop (``Engine.waker``), and the housekeeping ticks (faults, the TTL
sweep, SGLang's waiting timeout) become periodic events. A step's due time is the previous due time
plus its duration over the testbed's ``speed``, exactly as the real scheduler aims for.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

import numpy as np

from rushhour.loadgen.testbed_proc import testbed_config
from rushhour.scenarios.model import Scenario
from rushhour.sim.client import Exchange
from rushhour.sim.loop import NS, Loop, VirtualClock
from rushhour.sim.ticks import TickLog
from rushhour.testbed.config import FaultSpec, TestbedConfig, from_dict
from rushhour.testbed.engine import JOB_ORDER_KEY, Engine, EngineParams, Replica
from rushhour.testbed.job import DONE, RUNNING, Job
from rushhour.testbed.policies import freeness
from rushhour.testbed.stack import TICK_S, Stack

LEAD_NS = 3 * NS  # the testbed is up this long before t = 0 (the runner's start-up lead)


def build_config(scenario: Scenario, replicas: int | None = None) -> tuple[TestbedConfig, list[FaultSpec]]:
    """The primary testbed's config, as ``rushhour run`` writes it, and its faults (scheduled from t = 0)."""
    data = testbed_config(scenario, with_faults=False)
    if replicas is not None:
        data["replicas"] = replicas
    cfg = from_dict(TestbedConfig, data).validate()
    faults = [from_dict(FaultSpec, f, f"faults[{i}]") for i, f in enumerate(scenario.target.testbed.faults)]
    return cfg, faults


_NEVER = 1 << 62
_KEY0 = itemgetter(0)
MIN_JUMP_STEPS = 3  # a shorter run of decode steps is stepped one by one (nothing to gain)
_LOOP_STEPS = 24  # a jump this short has its step times computed one by one; a longer one in array passes


@dataclass(slots=True, eq=False)
class Jump:
    """A replica's run of identical decode steps: steps 1..K-1 are lazy, step K is an ordinary step event."""

    times: list[int]  # due time of steps 1..K
    n: int  # tokens per step: one per running job, every one of them a lazy decoder
    done: int = 0  # lazy steps applied so far


class SimReplica(Replica):
    """The testbed's replica with a pending decode jump (KV readers see the steps due by now) and, with jumps on,
    lazy decoders: a running job past its prefill gets one token at every step as long as the step's budget and
    KV leave every running job its chunk, so its tokens and token facts are settled at its end (or when it is
    taken out, or a step's plan needs every job one by one) from the replica's step times, not at each step.

    Every operation that moves its waiting count or KV names it in ``dirty`` (the engine's set, when the
    cluster tracks saturation): the engine then rescores only the replicas that changed."""

    jump: Jump | None = None
    dirty: set[int] | None = None
    lazy: dict[Job, int] | None = None  # lazy decoder -> the step its output and KV were settled at
    ticks: TickLog
    lazy_keys: list[tuple[float, int, int]]  # the lazy decoders' order keys, sorted
    _ends: list[tuple[int, int, Job]]  # heap of (step of its last token, seq, job); stale entries skipped
    _end_of: dict[Job, int]  # the step of a job's newest entry in _ends, while that entry is there
    _lazy_step = False  # the planned step gives every lazy decoder a token
    _planned_running = 0  # plan entries before the planned step's admissions
    runs: dict[Job, tuple[int, int, int | None]]  # token facts of lazy decoders that ended in the last step

    def decode_lazily(self) -> None:
        """Settle decoding jobs lazily from now on (the cluster's jumps are on)."""
        self.lazy = {}
        self.ticks = TickLog()
        self.lazy_keys = []
        self._ends = []
        self._end_of = {}
        self.runs = {}

    def add(self, job: Job, now: int) -> None:
        """``Replica.add``, noted in ``dirty``."""
        super().add(job, now)
        if self.dirty is not None:
            self.dirty.add(self.index)

    def remove(self, job: Job) -> None:
        """``Replica.remove`` (a lazy decoder settled first), noted in ``dirty``."""
        if self.lazy and job in self.lazy:
            self._settle_lazy(job)
        super().remove(job)
        if self.dirty is not None:
            self.dirty.add(self.index)

    def preempt(self, victim: Job) -> None:
        """``Replica.preempt``, a lazy job settled first."""
        if self.lazy and victim in self.lazy:  # pragma: no cover - a plan that preempts settles every lazy job first
            self._settle_lazy(victim)
        super().preempt(victim)

    def drain(self) -> list[Job]:
        """``Replica.drain``, noted in ``dirty``."""
        jobs = super().drain()
        if self.dirty is not None:
            self.dirty.add(self.index)
        return jobs

    # ---- lazy decoders -------------------------------------------------------------------------
    def _settle_lazy(self, job: Job) -> None:
        """Give a lazy decoder its tokens up to the last step, and their facts to its client; it is no longer lazy."""
        lazy = self.lazy
        assert lazy is not None
        since = lazy.pop(job)
        keys = self.lazy_keys
        del keys[bisect_left(keys, job.key)]
        new = self.ticks.last - since
        if new > 0:
            job.computed += new
            job.output += new
            sink: Exchange = job.sink  # type: ignore[assignment]  # the simulator's sinks
            sink.on_token_run(job, *self.ticks.facts(since))

    def _make_lazy(self, jobs: Any) -> None:
        """Of the jobs just stepped, those now decoding (their next chunk is one token) become lazy."""
        lazy = self.lazy
        assert lazy is not None
        tick = self.ticks.last
        end_of = self._end_of
        for job in jobs:
            if job.state == RUNNING and job.replica == self.index and job.output >= 1 and job not in lazy and (
                    job.prompt_tokens + job.output - job.computed == 1):
                lazy[job] = tick
                insort(self.lazy_keys, job.key)
                end = tick + job.max_tokens - job.output
                # a decoder settled and lazy again (a step walked one by one) ends at the same step as a rule: its
                # entry is still in the heap, and a second one would only be popped as stale
                if end_of.get(job) != end:
                    heapq.heappush(self._ends, (end, job.seq, job))
                    end_of[job] = end

    def lazy_end(self) -> int | None:
        """The step of the next lazy decoder's last token (None: none)."""
        ends, lazy, end_of = self._ends, self.lazy, self._end_of
        assert lazy is not None
        while ends:
            step, _, job = ends[0]
            since = lazy.get(job)
            if since is not None and since + job.max_tokens - job.output == step:
                return step
            heapq.heappop(ends)
            if end_of.get(job) == step:
                del end_of[job]
        return None

    def plan_step(self, now: int) -> float | None:
        """``Replica.plan_step`` (admissions, preemptions), noted in ``dirty``; with lazy decoders, each of them
        one token without being walked, when the budget and KV leave every running job its whole chunk (so the
        order in which the running jobs are served decides nothing), else every job one by one as the testbed."""
        dur = self._plan_lazily(now) if self.lazy is not None else super().plan_step(now)
        if self.dirty is not None:
            self.dirty.add(self.index)
        return dur

    def _plan_lazily(self, now: int) -> float | None:
        lazy = self.lazy
        assert lazy is not None
        self._lazy_step = False
        if lazy:
            plan = self._plan_others(lazy)
            if plan is not None:
                demand = len(lazy) + sum(plan.values())
                self._planned_running = len(plan)
                kv = self._admit(plan, self.kv + demand, self.p.max_num_batched_tokens - demand, False, now)
                self._plan = plan
                self._lazy_step = True
                return self._duration(plan, kv, len(lazy))
            for job in list(lazy):
                self._settle_lazy(job)
        return super().plan_step(now)

    def _plan_others(self, lazy: dict[Job, int]) -> dict[Job, int] | None:
        """The chunks of the running jobs that are not lazy, as ``Replica._plan_running`` gives them, when every lazy
        decoder gets its token and nothing is preempted; else None (the testbed's walk decides). The running jobs
        are served by key from the step's budget: one served before the last lazy decoder must get its whole chunk
        (the lazy ones' tokens reserved first: a test that errs towards None); one after it gets what is left."""
        p = self.p
        budget = p.max_num_batched_tokens - len(lazy)
        last = self.lazy_keys[-1]
        running = self.running
        # lazy decoders are running jobs: as many of both, and none is left to plan (a jump's steps, as a rule)
        others = [j for j in running if j not in lazy] if len(running) != len(lazy) else []
        plan: dict[Job, int] = {}
        total = len(lazy)
        for job in sorted(others, key=JOB_ORDER_KEY) if len(others) > 1 else others:
            if job.state != RUNNING:
                continue
            chunk = job.prompt_tokens + job.output - job.computed
            if chunk > budget:
                if job.key < last:
                    return None
                chunk = budget
            if chunk <= 0:
                continue
            plan[job] = chunk
            budget -= chunk
            total += chunk
        return plan if self.kv + total <= p.kv_capacity_tokens else None

    def finish_step(self, now: int, out: list[Job] | None = None) -> None:
        """``Replica.finish_step`` (KV, retirements), noted in ``dirty``; lazy decoders end at their last token."""
        if self.lazy is None:
            super().finish_step(now, out)
        else:
            assert out is not None
            self.ticks.push(now)
            plan = self._plan
            if self._lazy_step:
                self._finish_lazily(now, out)
            else:
                super().finish_step(now, out)
            self._make_lazy(plan)
            if self.lazy and self.ticks.full():
                self.ticks.trim(min(self.lazy.values()))  # the oldest step a lazy decoder settles from
        if self.dirty is not None:
            self.dirty.add(self.index)

    def _finish_lazily(self, now: int, out: list[Job]) -> None:
        """``Replica.finish_step`` of a step whose lazy decoders each got a token: the plan's jobs and the lazy ones
        that end are walked in the testbed's order (the running by key, then the admitted), the rest not at all."""
        lazy = self.lazy
        assert lazy is not None
        self.steps_total += 1
        plan = self._plan
        self._plan = {}
        tick = self.ticks.last
        ends, end_of = self._ends, self._end_of
        ending: list[tuple[tuple[float, int, int], Job, int]] = []
        while ends and ends[0][0] <= tick:
            step, _, job = heapq.heappop(ends)
            if end_of.get(job) == step:
                del end_of[job]
            since = lazy.get(job)
            if since is not None and since + job.max_tokens - job.output == step:
                del lazy[job]  # its key stays in lazy_keys until it is retired below, in order
                ending.append((job.key, job, since))
        ending.sort(key=_KEY0)
        keys = self.lazy_keys
        idx = self.index
        p = self.p
        pc = p.prefix_cache
        cap, bt = p.kv_capacity_tokens, p.block_tokens
        free_blocks = None
        e = 0
        for pos, (job, chunk) in enumerate(plan.items()):
            admitted = pos >= self._planned_running
            while e < len(ending) and (admitted or ending[e][0] < job.key):
                self._retire_lazy(ending[e][1], ending[e][2], now, out)
                e += 1
            if job.state != RUNNING or job.replica != idx:
                continue  # cancelled meanwhile
            before = job.computed
            computed = before + chunk
            job.computed = computed
            self.kv += chunk
            prompt = job.prompt_tokens
            if before < prompt <= computed and pc and job.blocks:
                if free_blocks is None:
                    # the KV as the testbed's walk has it here: the lazy decoders served before this job have
                    # their token already (all of them, before an admitted job)
                    ahead = len(keys) if admitted else bisect_left(keys, job.key)
                    free_blocks = (cap - self.kv - ahead) // bt
                self.cache.insert(job.blocks, free_blocks + len(job.blocks))
            if computed >= prompt + job.output:
                self._token(job, computed, now)
                out.append(job)
        for _, job, since in ending[e:]:
            self._retire_lazy(job, since, now, out)
        self.kv += len(lazy)  # every lazy decoder that goes on: one token

    def _retire_lazy(self, job: Job, since: int, now: int, out: list[Job]) -> None:
        keys = self.lazy_keys
        del keys[bisect_left(keys, job.key)]
        new = self.ticks.last - since
        job.computed += new
        job.output += new
        self.kv += 1  # this step's token, then the whole KV freed
        self.running.remove(job)
        self.kv -= job.computed
        job.state = DONE
        job.end_ns = now
        self.runs[job] = self.ticks.facts(since)
        out.append(job)

    def _pending(self) -> int:
        j = self.jump
        if j is None:
            return 0
        return (bisect_right(j.times, self.clock.now_ns(), 0, len(j.times) - 1) - j.done) * j.n

    def kv_used(self) -> int:
        """KV tokens held now, steps of a pending jump included."""
        return self.kv + self._pending()

    def kv_usage(self) -> float:
        """Fraction of KV capacity in use now, steps of a pending jump included."""
        return (self.kv + self._pending()) / self.p.kv_capacity_tokens


def jump_times(due: int, steps: int, n: int, kv0: int, p: EngineParams, slow: float, speed: float) -> list[int]:
    """Due times of steps 1..``steps`` of a decode run, step 1 due at ``due``: step s holds ``kv0 + n·s`` KV tokens,
    and its duration is ``Replica._duration``'s (decode only), as the ordinary steps would have it."""
    if steps <= _LOOP_STEPS:
        return _jump_times_loop(due, steps, n, kv0, p, slow, speed)
    return _jump_times_array(due, steps, n, kv0, p, slow, speed)


def _jump_times_loop(due: int, steps: int, n: int, kv0: int, p: EngineParams, slow: float, speed: float) -> list[int]:
    base_s, per_seq, per_kv, per_prefill = p.base_s, p.per_seq_s, p.per_kv_token_s, p.prefill_per_token_s
    times = [due]
    t = due
    for s in range(2, steps + 1):
        dur = (base_s + per_seq * n + per_kv * (kv0 + n * s) + per_prefill * 0) * slow
        t += max(1, int(dur / speed * NS))
        times.append(t)
    return times


def _jump_times_array(due: int, steps: int, n: int, kv0: int, p: EngineParams, slow: float, speed: float) -> list[int]:
    """``_jump_times_loop`` in array passes: the same float operations in the same order, element by element."""
    kv = (kv0 + n * np.arange(2, steps + 1, dtype=np.int64)).astype(np.float64)
    dur = ((p.base_s + p.per_seq_s * n) + p.per_kv_token_s * kv + p.prefill_per_token_s * 0) * slow
    gaps = np.maximum((dur / speed * NS).astype(np.int64), 1)
    times: list[int] = [due]
    times.extend((due + np.cumsum(gaps)).tolist())
    return times


class SimEngine(Engine):
    """The testbed's engine with a flat saturation: flow control asks at every admission and every step."""

    replicas: list[SimReplica]  # type: ignore[assignment]
    # tracked saturation (``track``): each replica's score, kept until it changes (flow control asks
    # far more often than a replica changes: once per queued request dispatched and per step)
    _scores: list[float] | None = None
    _dirty: set[int]
    _jumping: set[int]
    _until: dict[int, int]  # a jumping replica's score holds until its next lazy step is due
    _deadlines: list[tuple[int, int]]  # heap of (until, replica): the jumps' scores by when they fall due
    _sum: float  # the saturation of the scores as they are (valid while nothing is dirty)
    _up: list[SimReplica]

    def track(self, jumping: set[int]) -> None:
        """Keep per-replica scores from now on; every change must come through ``SimReplica``'s operations,
        ``set_up`` or ``touched`` (the cluster's own KV moves); ``jumping`` is the cluster's set of jumps."""
        self._dirty = set(range(len(self.replicas)))
        self._scores = [0.0] * len(self.replicas)
        self._jumping = jumping
        self._until = {}
        self._deadlines = []
        self._sum = 0.0
        self._up = [r for r in self.replicas if r.up]
        for r in self.replicas:
            r.dirty = self._dirty

    def touched(self, index: int) -> None:
        """Replica ``index``'s KV or jump changed outside its own operations."""
        if self._scores is not None:
            self._dirty.add(index)
            self._until.pop(index, None)

    def set_up(self, index: int, up: bool) -> list[Job]:
        """``Engine.set_up``, the tracked views kept."""
        dropped = super().set_up(index, up)
        if self._scores is not None:
            self._up = [r for r in self.replicas if r.up]
            self._dirty.add(index)
        return dropped

    def up_replicas(self) -> list[Replica]:
        """``Engine.up_replicas``, from the tracked list when there is one."""
        if self._scores is None:
            return super().up_replicas()
        return list(self._up)

    def saturation(self) -> float:
        """``Engine.saturation`` with the replicas' KV views inlined: the same divisions in the same order.

        Tracked, only the changed replicas and the jumps whose next step fell due are scored again; the
        sum runs over every replica's score in index order, so the float is the same to the last bit."""
        scores = self._scores
        if scores is None or len(self._up) != len(scores):
            return self._saturation()
        now = self.clock.now_ns()
        self._mark_due(now)
        self._rescore(now)
        return self._sum

    def saturated(self, threshold: float) -> bool:
        """``saturation() >= threshold``; the jumps whose next step fell due are scored only when the rest is below
        it: a lazy step only adds KV, so their scores (and the sum, rounded in the same order) can only rise."""
        scores = self._scores
        if scores is None or len(self._up) != len(scores):
            return self._saturation() >= threshold
        now = self.clock.now_ns()
        self._rescore(now)
        if self._sum >= threshold:
            return True
        self._mark_due(now)
        self._rescore(now)
        return self._sum >= threshold

    def _mark_due(self, now: int) -> None:
        """Jumps whose next lazy step fell due (a replica's score holds until then) are dirty; an entry whose replica
        stopped jumping or was scored again since is stale (``touched`` dirties a replica it changes)."""
        due = self._deadlines
        if due and due[0][0] <= now:
            dirty, until, jumping = self._dirty, self._until, self._jumping
            while due and due[0][0] <= now:
                t, i = heapq.heappop(due)
                if until.get(i) == t and i in jumping:
                    dirty.add(i)

    def _rescore(self, now: int) -> None:
        """Score the dirty replicas again, and the sum."""
        dirty = self._dirty
        if not dirty:
            return
        scores = self._scores
        assert scores is not None
        until, due = self._until, self._deadlines
        qd, kt = self.queue_depth, self.kv_threshold
        replicas = self.replicas
        for i in dirty:
            r = replicas[i]
            w = r.n_waiting / qd
            kv = r.kv
            j = r.jump
            if j is not None:
                times = j.times
                m = bisect_right(times, now, 0, len(times) - 1)
                kv += (m - j.done) * j.n
                # the score holds until the next step falls due (the last one is an ordinary event)
                if m < len(times) - 1:
                    until[i] = times[m]
                    heapq.heappush(due, (times[m], i))
                else:
                    until[i] = _NEVER
            k = kv / r.p.kv_capacity_tokens / kt
            scores[i] = w if w >= k else k
        dirty.clear()
        self._sum = sum(scores) / len(scores)  # in index order: the same float as the engine's

    def _saturation(self) -> float:
        qd, kt = self.queue_depth, self.kv_threshold
        now = self.clock.now_ns()
        scores = []
        for r in self.replicas:
            if not r.up:
                continue
            w = r.n_waiting / qd
            kv = r.kv
            j = r.jump
            if j is not None:
                kv += (bisect_right(j.times, now, 0, len(j.times) - 1) - j.done) * j.n
            k = kv / r.p.kv_capacity_tokens / kt
            scores.append(w if w >= k else k)
        return sum(scores) / len(scores) if scores else 1.0

    def place(self, job: Job) -> Replica | None:
        """``Engine.place`` without a ``ReplicaView`` per replica: the same scores, the same pick (``pick_replica``:
        the key's index term makes every key distinct, so the first best in index order is its answer: a score
        strictly above the best so far, no key tuple per replica)."""
        prefix = self.prefix_aware and bool(job.blocks)
        blocks, n = job.blocks, len(job.blocks)
        headroom = self.headroom
        best: Replica | None = None
        best_score = 0.0
        guess = 0  # most replicas hold the same shared head of a prompt (a system prompt): the last answer first
        for r in self.replicas:
            if not r.up:
                continue
            if prefix:
                known = r.cache.known(blocks, guess)
                if known:
                    guess = known
                hit = known / n
            else:
                hit = 0.0
            load = (r.n_waiting + len(r.running)) / r.p.max_num_seqs
            if headroom is not None:
                h_max, lam = headroom
                score = freeness(r.p.kv_capacity_tokens, r.kv_used(), r.tiers_present() | {job.tier},
                                 len(r.running) + r.n_waiting, h_max, lam)
            elif self.prefix_aware:
                score = 2.0 * hit - load
            else:
                score = -load  # min by (load, index)
            if best is None or score > best_score:
                best, best_score = r, score
        return best


class Cluster:
    """One simulated serving stack on the loop's clock."""

    def __init__(self, cfg: TestbedConfig, faults: list[FaultSpec], loop: Loop, jumps: bool = True) -> None:
        self.cfg = cfg
        self.loop = loop
        clock: VirtualClock = loop.clock
        # the stack starts before t = 0 so that its warm-up is over when the schedule starts, as in a real run
        started = clock.t
        clock.t = -LEAD_NS - int(cfg.warmup_s / cfg.speed * NS)
        self.stack = Stack(cfg, clock, engine_cls=SimEngine, replica_cls=SimReplica)  # same state, plus the jumps
        clock.t = started
        for spec in faults:
            self.stack.faults.add(spec, 0)
        self.engine = cast(SimEngine, self.stack.engine)
        self.engine.waker = self._wake
        self.replicas = cast(list[SimReplica], self.engine.replicas)
        # decode jumps only where nothing between steps can differ: no faults (slow factors, cuts, replicas
        # down), no SGLang priority preemption, no llm-d eviction or revocation (a gated dispatch cycle
        # still evicts)
        evicts = self.stack.flow is not None and (cfg.flow_control.enable_eviction or cfg.flow_control.revocation)
        self.jumps = jumps and not evicts and not self.stack.faults.faults and all(
            r.priority_preemption is None for r in self.replicas)
        self.jumping: set[int] = set()
        if self.jumps:
            for r in self.replicas:
                r.decode_lazily()
        self.engine.track(self.jumping)
        self._epoch = [0] * len(self.replicas)  # bumped when a jump's last-step event goes stale
        self._due: list[int | None] = [None] * len(self.engine.replicas)
        self._woken: set[int] = set()
        self._plan_pending = False
        self.steps = 0

    def start(self) -> None:
        """Schedule the housekeeping ticks (the steps start when work arrives)."""
        st = self.stack
        if st.faults.faults or (self.cfg.profile == "sglang" and self.cfg.sglang.waiting_timeout_s) or st.flow:
            self._every(int(TICK_S / self.cfg.speed * NS), self._tick)
        if st.flow is not None:
            self._every(int(self.cfg.flow_control.sweep_interval_s / self.cfg.speed * NS), st.sweep_ttl)

    def _every(self, period_ns: int, fn: Any) -> None:
        def again() -> None:
            fn()
            self.loop.at(self.loop.clock.t + period_ns, again)

        self.loop.at(self.loop.clock.t + period_ns, again)

    def _tick(self) -> None:
        st = self.stack
        st.settle_revocations()
        if st.faults.faults:
            st.apply_faults()
        st.sweep_waiting_timeout()
        if st.flow is not None:
            st.dispatch()  # warm-up end or a replica back up

    # ---- requests ----------------------------------------------------------------------------
    def admit(self, job: Job) -> Any:
        """Admit a job (queued or placed) or return the profile's rejection ``Reply``."""
        return self.stack.admit(job)

    def cancel(self, job: Job) -> bool:
        """The client went away; True if the job was still queued at the gateway."""
        if job.replica is not None and job.replica in self.jumping:
            self._unjump(job.replica)
        return self.stack.cancel(job)

    # ---- the step scheduler ------------------------------------------------------------------
    def _wake(self, index: int) -> None:
        if index in self.jumping:
            self._unjump(index)  # a request waits there now: the next step may admit it
        if self._due[index] is not None:
            return
        self._woken.add(index)
        if not self._plan_pending:  # one plan for a burst of submits at the same instant, as call_soon does
            self._plan_pending = True
            self.loop.soon(self._plan_woken)

    def _plan_woken(self) -> None:
        self._plan_pending = False
        woken, self._woken = self._woken, set()
        now = self.loop.clock.t
        for i in sorted(woken):
            if self._due[i] is None:
                self._plan(i, now)

    def _plan(self, i: int, base: int) -> None:
        r = self.engine.replicas[i]
        due = None
        if r.up and r.busy():
            waiting, kv, preemptions = r.n_waiting, r.kv, r.preemptions_total
            dur = r.plan_step(self.loop.clock.t)
            # admitted work (fewer waiting) or a preemption (less KV) may have lowered the saturation below the
            # ceiling: then the pool's next step runs a dispatch cycle that dispatches
            if (r.n_waiting < waiting or r.kv < kv) and self.jumping and self._queued() and not self._gated():
                self._cut_first_lazy_step()
            if dur is not None:  # None: work exists but none fits (waits on KV): idle until woken
                due = base + max(1, int(dur / self.cfg.speed * NS))
                if self.jumps:
                    due = self._jump(i, due, r.preemptions_total != preemptions)
                self.loop.at(due, self._fire, i, due, self._epoch[i])
        self._due[i] = due

    def _fire(self, i: int, at: int, epoch: int) -> None:
        if self._due[i] != at or self._epoch[i] != epoch:
            return  # stale (the replica went down and came back meanwhile, or its jump was cut short)
        self._due[i] = None
        r = self.engine.replicas[i]
        if i in self.jumping:
            self._unjump(i)  # the lazy steps before this one; this one is the jump's last (a finish or KV)
        self.steps += 1
        jobs: list[Job] = []
        if r.up:
            r.finish_step(at, jobs)
        self.engine.on_step()
        if self._due[i] is None:
            self._plan(i, at)
        runs = r.runs if r.lazy is not None else None
        for job in jobs:  # tokens reach the clients after the step, as the real drain hands them out
            sink = job.sink
            run = runs.pop(job, None) if runs else None
            if run is None:
                sink.on_token(job)
            else:  # a lazy decoder's last token: the facts of all its tokens since it was last settled
                sink.on_token_run(job, *run)  # type: ignore[attr-defined]  # the simulator's sinks
            if job.end_ns is not None:
                sink.on_finish(job)

    # ---- decode jumps ------------------------------------------------------------------------------
    def _jump(self, i: int, due: int, preempted: bool) -> int:
        """When step 1 (just planned, due at ``due``) starts a run of identical decode steps, make the steps up
        to the first finish (or the KV limit) lazy; returns the due time of the step that is an event."""
        r = self.replicas[i]
        p = r.p
        plan = r._plan
        flow = self.stack.flow
        lazy = r.lazy
        assert lazy is not None  # jumps come with lazy decoders: a jump's steps are theirs
        n = len(lazy)
        if plan or not r._lazy_step or n != len(r.running) or r.slow_factor != 1.0:
            return due  # a job being prefilled (or none lazy): the steps differ
        if r.n_waiting and len(r.running) < p.max_num_seqs and preempted:
            # vLLM admits nothing in a step that preempted: a request waiting here may be admitted at the next one.
            # Otherwise the first waiting one was refused for want of KV (all-decode plan: the budget was not the
            # limit), and each step of the run only adds KV, so it is refused at every one of them; the planned
            # step touched its prefix in the cache, and the lazy steps' touches would leave the same LRU order
            return due
        if flow is not None and flow.count and not self._gated():
            return due  # the gateway would dispatch at the next step
        end = r.lazy_end()  # the first lazy decoder to end: the run's last step
        assert end is not None
        steps = end - r.ticks.last
        kv0 = r.kv
        steps = min(steps, (p.kv_capacity_tokens - kv0) // n)  # no step of the run may preempt
        if steps < MIN_JUMP_STEPS:
            return due
        # plan_step's duration of step s: its KV is kv0 + n * s (every running job one token further)
        times = jump_times(due, steps, n, kv0, p, r.slow_factor, self.cfg.speed)
        t = times[-1]
        r.jump = Jump(times, n)
        self.jumping.add(i)
        self.engine.touched(i)  # its score now follows the jump's steps (it may have been scored just before)
        return t

    def _gated(self) -> bool:
        """True when a dispatch cycle now would dispatch nothing: no endpoint, or the pool at its saturation
        ceiling. Between events lazy steps only add KV, so the pool stays gated until the next event."""
        st = self.stack
        if st.endpoints() == 0:
            return True
        return st.engine.saturated(self.cfg.flow_control.saturation_ceiling)

    def _queued(self) -> bool:
        """True when requests wait at the gateway (a dispatch cycle without them does nothing)."""
        flow = self.stack.flow
        return flow is not None and flow.count > 0

    def _cut_first_lazy_step(self) -> None:
        """The gate opened with requests queued: the pool's next step, wherever it is, runs a dispatch cycle that
        dispatches until the pool is gated again or its queue is empty, so every later step's cycle does nothing
        until the next event that lowers the saturation (an admission, a finish, a cancel: each runs its own
        cycle or comes back here). Only that first step must be an ordinary event: when it is a jump's lazy step,
        that jump goes on step by step from it; the other jumps stay (step by step, each would fire a cycle that
        does nothing, plan the same decode step and jump again with the same step times)."""
        now = self.loop.clock.t
        first: tuple[int, int] | None = None  # (due, replica) of the first lazy step
        ordinary = min((d for k, d in enumerate(self._due) if d is not None and k not in self.jumping),
                       default=_NEVER)
        for i in self.jumping:
            times = self.replicas[i].jump.times  # type: ignore[union-attr]  # every jumping replica has one
            last = len(times) - 1
            m = bisect_right(times, now, 0, last)
            t = times[m]
            if m == last:  # the jump's last step is an ordinary event already
                ordinary = min(ordinary, t)
            elif first is None or (t, i) < first:
                first = (t, i)
        if first is not None and first[0] <= ordinary:
            self._unjump(first[1])

    def _settle(self, r: SimReplica, j: Jump) -> None:
        """Apply the lazy steps due by now: the KV and the replica's step times (the lazy decoders' tokens and token
        facts are settled from these when each ends or is taken out)."""
        now = self.loop.clock.t
        times = j.times
        m = bisect_right(times, now, 0, len(times) - 1)
        new = m - j.done
        if new <= 0:
            return
        r.ticks.extend(times[j.done:m])  # the lazy decoders' tokens are settled from these at their ends
        j.done = m
        r.kv += j.n * new
        self.engine.touched(r.index)
        r.steps_total += new
        self.steps += new

    def _unjump(self, i: int) -> None:
        """Settle replica i's jump and go on step by step from the next step (already planned, decode only)."""
        r = self.replicas[i]
        j = r.jump
        assert j is not None
        self._settle(r, j)
        r.jump = None
        self.jumping.discard(i)
        self.engine.touched(i)
        nxt = j.times[j.done]  # planned already: every lazy decoder one token (plan_step's empty plan)
        if nxt != j.times[-1]:  # the event at the last step's time goes stale
            self._epoch[i] += 1
            self._due[i] = nxt
            self.loop.at(nxt, self._fire, i, nxt, self._epoch[i])
