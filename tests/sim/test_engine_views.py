"""The simulator's flat engine views (saturation, placement) give the testbed engine's answers, bit for bit."""

from __future__ import annotations

import random

import pytest

from rushhour.sim.cluster import SimEngine, SimReplica
from rushhour.testbed.clock import MonotonicClock
from rushhour.testbed.engine import Engine, EngineParams
from rushhour.testbed.job import RUNNING, WAITING, Job
from tests.testbed.testbed_helpers import chained_blocks


@pytest.mark.parametrize(("prefix_aware", "headroom"), [(True, None), (False, None), (True, (0.1, 0.5))])
def test_placement_and_saturation_are_the_engines(prefix_aware: bool, headroom: tuple[float, float] | None) -> None:
    params = EngineParams(8, 4000, 512, 16, 0.01, 1e-4, 1e-8, 1e-5)
    eng = Engine(params, 6, MonotonicClock(), prefix_aware=prefix_aware, headroom=headroom)
    for r in eng.replicas:
        r.__class__ = SimReplica
    rng = random.Random(4)
    shared = [rng.randrange(1 << 30) for _ in range(40)]
    checked = 0
    for step in range(400):
        for r in eng.replicas:  # a random state: load, KV, tiers present, cached prefixes, some replicas down
            r.up = rng.random() < 0.85
            r.running = [Job(f"r{step}-{i}", 0, 10, 5, tier=rng.randrange(3), state=RUNNING)
                         for i in range(rng.randrange(6))]
            r.kv = rng.randrange(4000)
            r.waiting = [((0.0, i, i), Job(f"w{step}-{i}", 0, 10, 5, tier=rng.randrange(3), state=WAITING,
                                           replica=r.index)) for i in range(rng.randrange(3))]
            r.n_waiting = len(r.waiting)
            if rng.random() < 0.3:
                r.cache.insert(chained_blocks([*shared[: rng.randrange(40)], rng.randrange(1 << 30)]))
        job = Job("x", 0, 100, 10, tier=rng.randrange(3),
                  blocks=chained_blocks(shared[: rng.randrange(41)] + [rng.randrange(1 << 30) for _ in range(3)]))
        want = Engine.place(eng, job)
        sat = Engine.saturation(eng)
        eng.__class__ = SimEngine
        assert eng.place(job) is want and eng.saturation() == sat
        eng.__class__ = Engine
        checked += want is not None
    assert checked > 300
