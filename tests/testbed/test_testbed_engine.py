"""Replicas and policies on a fake clock: batching, prefix cache, preemption, headroom."""

from __future__ import annotations

import math

from testbed_helpers import PlainLru, chained_blocks

from rushhour.testbed.clock import FakeClock
from rushhour.testbed.engine import EngineParams, Replica
from rushhour.testbed.job import DONE, WAITING, Job
from rushhour.testbed.policies import ReplicaView, freeness, headroom, pick_replica, pick_victim, pool_saturation
from rushhour.testbed.prefix_cache import PrefixCache
from rushhour.testbed.tokens import block_hashes, count_tokens


class Rec:
    """Sink that records events."""

    def __init__(self) -> None:
        self.tokens: dict[str, int] = {}
        self.finished: list[str] = []

    def on_dispatch(self, job: Job) -> None:
        pass

    def on_token(self, job: Job) -> None:
        self.tokens[job.rid] = self.tokens.get(job.rid, 0) + 1

    def on_finish(self, job: Job) -> None:
        self.finished.append(job.rid)

    def on_drop(self, job: Job, kind: str) -> None:
        pass


def params(**kw: object) -> EngineParams:
    base: dict[str, object] = dict(max_num_seqs=4, kv_capacity_tokens=1000, max_num_batched_tokens=512,
                                   block_tokens=4, base_s=0.01, per_seq_s=0.001, per_kv_token_s=0.0,
                                   prefill_per_token_s=0.0001)
    base.update(kw)
    return EngineParams(**base)  # type: ignore[arg-type]


def mk(rid: str, prompt: int = 10, out: int = 3, rank: float = 0.0, arrival: int = 0, text: bytes = b"",
       sink: Rec | None = None) -> Job:
    j = Job(rid=rid, arrival_ns=arrival, prompt_tokens=prompt, max_tokens=out, rank=rank,
            blocks=block_hashes(text, 4) if text else [])
    if sink is not None:
        j.sink = sink
    return j


def run(r: Replica, clk: FakeClock, steps: int = 1000) -> None:
    for _ in range(steps):
        d = r.plan_step(clk.now_ns())
        if d is None:
            return
        clk.advance_s(d)
        r.finish_step(clk.now_ns())


def test_token_counting_and_blocks() -> None:
    assert count_tokens(b"") == 1
    assert count_tokens(b"abcd") == 1 and count_tokens(b"abcde") == 2
    a = block_hashes(b"x" * 40 + b"tail", 4)  # 16-byte blocks
    b = block_hashes(b"x" * 40 + b"diff", 4)
    assert len(a) == 2 and a == b
    assert block_hashes(b"y" + b"x" * 39, 4)[0] != a[0]


def test_continuous_batching_respects_max_num_seqs_and_emits_all_tokens() -> None:
    clk = FakeClock()
    sink = Rec()
    r = Replica(0, params(max_num_seqs=2), clk)
    for i in range(5):
        r.add(mk(f"j{i}", out=3, arrival=i, sink=sink), clk.now_ns())
    r.plan_step(clk.now_ns())
    assert len(r.running) == 2 and r.n_waiting == 3
    clk.advance_s(0.01)
    r.finish_step(clk.now_ns())
    run(r, clk)
    assert sink.tokens == {f"j{i}": 3 for i in range(5)}
    assert sink.finished == ["j0", "j1", "j2", "j3", "j4"]
    assert not r.busy() and r.kv_used() == 0


def test_step_time_grows_with_batch() -> None:
    clk = FakeClock()
    r1 = Replica(0, params(), clk)
    r1.add(mk("a", prompt=1, out=5), 0)
    r1.plan_step(0)
    r1.finish_step(0)
    one = r1.plan_step(0)
    r4 = Replica(1, params(), clk)
    for i in range(4):
        r4.add(mk(f"b{i}", prompt=1, out=5, arrival=i), 0)
    r4.plan_step(0)
    r4.finish_step(0)
    four = r4.plan_step(0)
    assert one is not None and four is not None and four > one


def test_prefix_cache_hit_on_resent_prefix() -> None:
    clk = FakeClock()
    r = Replica(0, params(), clk)
    prefix = b"system prompt " * 20  # 280 bytes = 70 tokens
    first = mk("a", prompt=count_tokens(prefix + b"q1"), text=prefix + b"q1")
    r.add(first, 0)
    run(r, clk)
    assert first.cached_tokens == 0
    second = mk("b", prompt=count_tokens(prefix + b"q2 more"), text=prefix + b"q2 more")
    r.add(second, clk.now_ns())
    run(r, clk)
    assert second.cached_tokens == (len(prefix) // 16) * 4  # whole shared blocks
    assert r.prefix_hits_total == second.cached_tokens
    assert r.prefix_queries_total == first.prompt_tokens + second.prompt_tokens


def test_prefix_cache_lru_and_chain() -> None:
    c = PrefixCache(3)
    c.insert([1, 2, 3])
    assert c.match([1, 2, 24]) == 2
    c.insert([4])  # evicts the least recently used (3)
    assert c.match([1, 2, 3]) == 2
    assert len(c) == 3


def test_preemption_victim_is_lowest_priority_latest_arrival() -> None:
    jobs = [mk("hi-old", rank=0, arrival=1), mk("lo-old", rank=5, arrival=2), mk("lo-new", rank=5, arrival=3),
            mk("mid", rank=1, arrival=9)]
    assert pick_victim(jobs).rid == "lo-new"


def test_kv_exhaustion_preempts_and_recomputes() -> None:
    clk = FakeClock()
    sink = Rec()
    # 3 requests of 40 prompt + 20 output need 180 KV tokens but only 150 exist
    r = Replica(0, params(kv_capacity_tokens=150), clk)
    for i, rank in enumerate([0, 2, 1]):
        r.add(mk(f"r{rank}", prompt=40, out=20, rank=rank, arrival=i, sink=sink), 0)
    run(r, clk)
    assert sink.tokens == {"r0": 20, "r1": 20, "r2": 20}  # vLLM delays a victim, never fails it
    assert r.preemptions_total >= 1


def test_preempted_job_goes_back_to_waiting() -> None:
    clk = FakeClock()
    r = Replica(0, params(kv_capacity_tokens=100), clk)
    a = mk("a", prompt=45, out=30, rank=0, arrival=0)
    b = mk("b", prompt=45, out=30, rank=1, arrival=1)
    r.add(a, 0)
    r.add(b, 0)
    for _ in range(12):
        d = r.plan_step(clk.now_ns())
        if b.preemptions:
            break
        assert d is not None
        clk.advance_s(d)
        r.finish_step(clk.now_ns())
    assert b.preemptions == 1 and b.state == WAITING and b.computed == 0
    assert a.preemptions == 0
    run(r, clk)
    assert a.state == DONE and b.state == DONE and b.output == 30


def test_headroom_formula_and_placement() -> None:
    assert headroom(1000, 0.2, 0.5, 0) == 200
    assert math.isclose(headroom(1000, 0.2, 0.5, 2), 200 * math.exp(-1.0))
    # a replica already holding tier 0 work is less free for everyone
    f_with_t0 = freeness(1000, 100, {0, 2}, 2, 0.2, 0.5)
    f_without = freeness(1000, 100, {2}, 2, 0.2, 0.5)
    assert f_with_t0 < f_without
    views = [ReplicaView(0, 0.5, 0.0, f_with_t0), ReplicaView(1, 0.5, 0.0, f_without)]
    assert pick_replica(views, prefix_aware=False, use_freeness=True) == 1


def test_pick_replica_least_loaded_and_prefix_bonus() -> None:
    views = [ReplicaView(0, 0.5, 0.0), ReplicaView(1, 0.25, 0.0)]
    assert pick_replica(views, False, False) == 1
    views = [ReplicaView(0, 0.5, 1.0), ReplicaView(1, 0.25, 0.0)]
    assert pick_replica(views, True, False) == 0
    assert pick_replica([], True, False) is None


def test_pool_saturation() -> None:
    assert pool_saturation([]) == 1.0
    assert pool_saturation([0.5, 1.5]) == 1.0


def test_a_waker_takes_the_steps_off_asyncio() -> None:
    """With ``Engine.waker`` set (the simulator), a submit wakes the waker; no event loop is needed."""
    from rushhour.testbed.engine import Engine

    eng = Engine(params(), 2, FakeClock())
    woken: list[int] = []
    eng.waker = woken.append
    job = Job("a", 0, 10, 2, sink=Rec())
    eng.submit(job, eng.replicas[1])
    assert woken == [1] and job.state == WAITING and eng._loop is None


def test_prefix_cache_keeps_the_lru_semantics_of_the_plain_loops() -> None:
    """The radix tree holds the cached blocks and their LRU order of the plain loops (chains of 8 prefixes)."""
    import random

    rng = random.Random(3)
    plain, fast = PlainLru(50), PrefixCache(50)
    for _ in range(5000):
        blocks = chained_blocks([rng.randrange(3) for _ in range(rng.randrange(30))])
        op = rng.random()
        if op < 0.7:
            touch = op < 0.35
            assert plain.match(blocks, touch) == fast.match(blocks, touch)
        else:
            limit = rng.choice([None, rng.randrange(60)])
            plain.insert(blocks, limit)
            fast.insert(blocks, limit)
        assert list(plain.blocks) == fast.lru_order()


def test_front_end_cpu_lengthens_the_next_step_only_when_the_engine_is_busy() -> None:
    """A calibrated front end on the engine's core: an arrival while a step runs adds its CPU to the next step
    (once); an arrival at an idle engine adds nothing (its latency is front_end_s); 0 changes nothing."""
    clk = FakeClock()
    plain, shared = Replica(0, params(), clk), Replica(0, params(front_end_cpu_s=0.004), clk)
    durations: list[tuple[float | None, float | None, float | None]] = []
    for r in (plain, shared):
        r.front_end_arrival()  # idle: nothing taken from a step
        r.add(mk("a", prompt=8, out=4), clk.now_ns())
        first = r.plan_step(clk.now_ns())
        r.finish_step(clk.now_ns())
        r.front_end_arrival()  # busy: the next step is longer by it, once
        r.front_end_arrival()
        second = r.plan_step(clk.now_ns())
        r.finish_step(clk.now_ns())
        third = r.plan_step(clk.now_ns())
        durations.append((first, second, third))
    (p1, p2, p3), (s1, s2, s3) = durations
    assert p2 is not None and s2 is not None and p3 is not None
    assert s1 == p1 and s3 == p3 and math.isclose(s2 - p2, 0.008)


def test_prefill_tokens_queued_counts_prompts_before_their_first_token() -> None:
    clk = FakeClock()
    r = Replica(0, params(max_num_seqs=1), clk)
    r.add(mk("a", prompt=30, out=5), clk.now_ns())
    r.add(mk("b", prompt=20, out=5, arrival=1), clk.now_ns())
    assert r.prefill_tokens_queued() == 50
    r.plan_step(clk.now_ns())
    r.finish_step(clk.now_ns())  # a: its first token; b waits
    assert r.prefill_tokens_queued() == 20
