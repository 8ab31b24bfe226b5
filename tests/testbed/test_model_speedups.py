"""Speed-ups of the testbed model that must not change it: prefix-cache chain tips, the inlined saturation."""

from __future__ import annotations

import random

from testbed_helpers import chained_blocks

from testbed.clock import MonotonicClock
from testbed.engine import Engine, EngineParams
from testbed.policies import pool_saturation
from testbed.prefix_cache import TIP_STEP, PrefixCache


def _naive(cache: PrefixCache, blocks: list[bytes]) -> int:
    n = 0
    for b in blocks:
        if b not in cache._blocks:
            break
        n += 1
    return n


def test_tips_give_the_same_matches_as_a_full_scan() -> None:
    rng = random.Random(3)
    shared = [rng.randrange(1 << 30) for _ in range(3 * TIP_STEP + 5)]
    cache = PrefixCache(capacity_blocks=12 * TIP_STEP)
    chains = []
    for _ in range(400):
        own = [rng.randrange(1 << 30) for _ in range(rng.randrange(1, 4 * TIP_STEP))]
        cut = rng.choice([0, TIP_STEP, len(shared)])
        chains.append(chained_blocks(shared[:cut] + own))
    skipped = hinted = 0
    for step in range(3000):
        chain = rng.choice(chains)
        if rng.random() < 0.2:
            free = rng.randrange(6 * TIP_STEP, 13 * TIP_STEP)
            cache.insert(chain, free)
        else:
            want = _naive(cache, chain)
            cache._anchors = []  # the tips alone (the remembered long matches are tested below)
            skipped += bool(cache._tips)
            hinted += bool(cache._tips) and cache._hint > 0  # the search starts from the last match's tip
            assert cache.match(chain, touch=rng.random() < 0.5) == want, step
    assert skipped > 500  # the tips were there to use
    assert hinted > 300


def test_the_remembered_long_matches_give_the_same_matches_as_a_full_scan() -> None:
    """A match starts after a remembered long match's prefix when the prompt has that prefix's last block (a
    swarm's shared context on every placement), and ``known`` answers without a scan when the prompt's next block
    is not cached; through inserts, evictions (each anchor checked, not forgotten) and other prompts, the count
    of a scan."""
    rng = random.Random(6)
    shared = [rng.randrange(1 << 30) for _ in range(2 * TIP_STEP + 11)]
    parts = []
    for _ in range(300):
        own = [rng.randrange(1 << 30) for _ in range(rng.randrange(1, 3 * TIP_STEP))]
        parts.append(shared[: rng.choice([0, TIP_STEP - 1, TIP_STEP, TIP_STEP + 5, *[len(shared)] * 4])] + own)
    parts += [p + [rng.randrange(1 << 30) for _ in range(rng.randrange(1, 40))] for p in parts[::4]]  # next steps
    chains = [chained_blocks(p) for p in parts]
    cache = PrefixCache(capacity_blocks=10 * TIP_STEP)
    remembered = decided = 0
    for step in range(5000):
        chain = rng.choice(chains)
        if rng.random() < 0.2:
            cache.insert(chain, rng.randrange(3 * TIP_STEP, 11 * TIP_STEP))  # evictions, some into the prompt
        else:
            want = _naive(cache, chain)
            remembered += any(k <= len(chain) and chain[k - 1] == h for k, h, _ in cache._anchors)
            known = cache.known(chain)
            assert known in (None, want), step  # placement's shortcut: the count, or no answer
            decided += known is not None
            assert cache.match(chain, touch=rng.random() < 0.5) == want, step
    assert remembered > 1000
    assert decided > 500


def test_inlined_saturation_is_the_policy_functions() -> None:
    """Engine.saturation (inlined for speed) equals pool_saturation of the endpoint scores, bit for bit."""
    params = EngineParams(256, 430_000, 8192, 16, 0.01, 1e-4, 1e-8, 1e-5)
    eng = Engine(params, 5, MonotonicClock())
    rng = random.Random(1)
    for _ in range(200):
        for r in eng.replicas:
            r.n_waiting, r.kv, r.up = rng.randrange(12), rng.randrange(430_000), rng.random() < 0.8
        assert eng.saturation() == pool_saturation(eng.endpoint_scores())
