"""Speed-ups of the testbed model that must not change it: the inlined saturation."""

from __future__ import annotations

import random

from rushhour.testbed.clock import MonotonicClock
from rushhour.testbed.engine import Engine, EngineParams
from rushhour.testbed.policies import pool_saturation


def test_inlined_saturation_is_the_policy_functions() -> None:
    """Engine.saturation (inlined for speed) equals pool_saturation of the endpoint scores, bit for bit."""
    params = EngineParams(256, 430_000, 8192, 16, 0.01, 1e-4, 1e-8, 1e-5)
    eng = Engine(params, 5, MonotonicClock())
    rng = random.Random(1)
    for _ in range(200):
        for r in eng.replicas:
            r.n_waiting, r.kv, r.up = rng.randrange(12), rng.randrange(430_000), rng.random() < 0.8
        assert eng.saturation() == pool_saturation(eng.endpoint_scores())
