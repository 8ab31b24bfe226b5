"""Flow controller on a fake clock: capacity, TTL, strict priority, fairness, cancel."""

from __future__ import annotations

from rushhour.testbed.clock import FakeClock
from rushhour.testbed.config import BandConfig, FlowControlConfig
from rushhour.testbed.flow import DISPATCHED, EVICTED_TTL, REJECTED_CAPACITY, FlowController
from rushhour.testbed.job import NO_ENDPOINTS, QUEUE_FULL, TTL_EXPIRED, Job


def job(rid: str, prio: int = 0, tenant: str = "t", size: int = 10) -> Job:
    return Job(rid=rid, arrival_ns=0, prompt_tokens=1, max_tokens=1, priority=prio, tenant=tenant,
               body_bytes=size)


def fc(**kw: object) -> FlowController:
    return FlowController(FlowControlConfig(**kw), ttl_s=60.0)  # type: ignore[arg-type]


def test_band_request_capacity_rejects_the_arrival() -> None:
    f = fc(bands=[BandConfig(priority=0, max_requests=2)])
    clk = FakeClock()
    assert f.enqueue(job("a"), clk.now_ns(), 1) is None
    assert f.enqueue(job("b"), clk.now_ns(), 1) is None
    assert f.enqueue(job("c"), clk.now_ns(), 1) == QUEUE_FULL
    # another band still has room: capacity is per band
    assert f.enqueue(job("d", prio=100), clk.now_ns(), 1) is None
    assert f.outcomes[0, REJECTED_CAPACITY] == 1
    assert f.queue_sizes() == {0: 2, 100: 1}


def test_byte_capacity_and_no_endpoints() -> None:
    f = fc(band_max_bytes=25)
    assert f.enqueue(job("a", size=20), 0, 1) is None
    assert f.enqueue(job("b", size=10), 0, 1) == QUEUE_FULL
    assert f.enqueue(job("c", size=10), 0, 0) == NO_ENDPOINTS


def test_zero_band_capacity_means_default() -> None:
    f = fc(bands=[BandConfig(priority=0, max_requests=0)], band_max_requests=1)
    assert f.enqueue(job("a"), 0, 1) is None
    assert f.enqueue(job("b"), 0, 1) == QUEUE_FULL


def test_ttl_expiry_sweep() -> None:
    clk = FakeClock()
    f = fc()
    f.enqueue(job("old"), clk.now_ns(), 1)
    clk.advance_s(30)
    f.enqueue(job("new"), clk.now_ns(), 1)
    clk.advance_s(30)
    out = f.expire(clk.now_ns(), 1)
    assert [(j.rid, k) for j, k in out] == [("old", TTL_EXPIRED)]
    assert f.outcomes[0, EVICTED_TTL] == 1
    clk.advance_s(30)
    assert [(j.rid, k) for j, k in f.expire(clk.now_ns(), 0)] == [("new", NO_ENDPOINTS)]
    assert f.count == 0


def test_strict_priority_and_gate_stops_lower_bands() -> None:
    f = fc()
    for i in range(3):
        f.enqueue(job(f"b{i}", prio=-1), i, 1)
        f.enqueue(job(f"s{i}", prio=0), i, 1)
        f.enqueue(job(f"i{i}", prio=100), i, 1)
    order: list[str] = []
    budget = [4]

    def sat(ceiling: float) -> bool:
        return (0.0 if budget[0] > 0 else 1.0) >= ceiling

    def send(j: Job) -> None:
        order.append(j.rid)
        budget[0] -= 1

    f.dispatch_cycle(sat, 1, send, 0)
    assert order == ["i0", "i1", "i2", "s0"]
    assert f.outcomes[100, DISPATCHED] == 3
    # no endpoints: nothing moves
    assert f.dispatch_cycle(lambda c: c <= 0.0, 0, send, 0) == 0
    budget[0] = 100
    f.dispatch_cycle(sat, 1, send, 0)
    assert order[4:] == ["s1", "s2", "b0", "b1", "b2"]


def test_global_strict_is_fcfs_across_tenants() -> None:
    f = fc()
    for i, t in enumerate(["a", "a", "a", "b"]):
        f.enqueue(job(f"{t}{i}", tenant=t), i, 1)
    order: list[str] = []
    f.dispatch_cycle(lambda c: c <= 0.0, 1, lambda j: order.append(j.rid), 0)
    assert order == ["a0", "a1", "a2", "b3"]


def test_round_robin_cycles_tenants() -> None:
    f = fc(fairness="round-robin")
    for i, t in enumerate(["a", "a", "a", "b", "b", "c"]):
        f.enqueue(job(f"{t}{i}", tenant=t), i, 1)
    order: list[str] = []
    f.dispatch_cycle(lambda c: c <= 0.0, 1, lambda j: order.append(j.rid), 0)
    assert order == ["a0", "b3", "c5", "a1", "b4", "a2"]


def test_cancel_removes_queued_job() -> None:
    f = fc()
    j = job("x")
    f.enqueue(j, 0, 1)
    assert f.cancel(j, 0)
    assert not f.cancel(j, 0)
    assert f.count == 0 and f.bytes == 0


def test_cancel_answers_as_the_bands_scan_would() -> None:
    """A cancel looks in the bands only for a queued job: through admissions, dispatches, TTL expiries and
    cancels, its answer is whether a band's scan finds the job, and the bands hold what they would."""
    import random

    from rushhour.testbed.job import RUNNING, WAITING

    rng = random.Random(4)
    f = fc(band_max_requests=40, ttl_s=5.0)
    jobs: list[Job] = []
    now = found = 0
    for step in range(4000):
        op = rng.random()
        if op < 0.4:
            j = job(f"j{step}", prio=rng.choice([-1, 0, 100]), tenant=rng.choice("abc"))
            f.enqueue(j, now, 1)
            jobs.append(j)
        elif op < 0.6:
            out: list[Job] = []
            f.dispatch_cycle(lambda c: rng.choice([0.0, 0.0, 1.0]) >= c, 1, out.append, 0)  # gated now and then
            for j in out:  # the engine's states after dispatch: waiting, then running, then done
                j.state = rng.choice([WAITING, RUNNING, "done"])
        elif op < 0.65:
            now += rng.randrange(2_000_000_000)
            f.expire(now, 1)
        elif jobs:
            j = rng.choice(jobs[-80:])
            queued = any(j in q for b in f.bands.values() for q in b.flows.values())
            found += queued
            assert f.cancel(j, 0) == queued, step
            assert not any(j in q for b in f.bands.values() for q in b.flows.values())
        assert f.count == sum(len(q) for b in f.bands.values() for q in b.flows.values())
    assert found > 100


def test_fairness_labels_stop_at_the_cap_and_remember_no_more() -> None:
    """llm-d's metrics keep at most fairness_id_cap tenants; later ones are "other", and are not stored either."""
    from rushhour.testbed.config import FlowControlConfig
    from rushhour.testbed.flow import FAIRNESS_OTHER, FlowController

    f = FlowController(FlowControlConfig(fairness_id_cap=3), None)
    assert [f.fairness_label(t) for t in ("a", "b", "c", "d", "a", "e")] == ["a", "b", "c", FAIRNESS_OTHER, "a",
                                                                            FAIRNESS_OTHER]
    for i in range(10_000):
        f.fairness_label(f"hostile-{i}")
    assert len(f.fairness_labels) == 3
