"""The cross-replica block index: its one walk gives every cache's own match, through inserts and evictions."""

from __future__ import annotations

import random

from testbed_helpers import chained_blocks

from testbed.prefix_cache import TIP_STEP, BlockIndex, PrefixCache


def _holders(caches: list[PrefixCache]) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for i, c in enumerate(caches):
        for b in c._blocks:
            out[b] = out.get(b, 0) | 1 << i
    return out


def test_leading_is_each_caches_match() -> None:
    rng = random.Random(5)
    shared = [rng.randrange(1 << 30) for _ in range(2 * TIP_STEP + 7)]
    chains = []
    for _ in range(300):
        own = [rng.randrange(1 << 30) for _ in range(rng.randrange(1, 3 * TIP_STEP))]
        chains.append(chained_blocks(shared[: rng.choice([0, 5, TIP_STEP, len(shared)])] + own))
    caches = [PrefixCache(capacity_blocks=rng.randrange(2, 8) * TIP_STEP) for _ in range(11)]
    index = BlockIndex()
    caches[0].insert(chains[0])  # a cache with blocks before it is attached
    for i, c in enumerate(caches):
        c.attach(index, 1 << i)
    partial = 0
    for step in range(4000):
        chain = rng.choice(chains)
        if rng.random() < 0.3:
            c = rng.choice(caches)
            c.insert(chain, rng.randrange(0, c.capacity_blocks + 50))  # evictions, some down to nothing
        else:
            got = index.leading(chain, len(caches))
            want = [c.match(chain, touch=rng.random() < 0.5) for c in caches]
            assert got == want, step
            partial += len(set(want)) > 2
        if step % 500 == 0:
            assert index.holders == _holders(caches)  # a block no cache holds any more is not kept
    assert index.holders == _holders(caches)
    assert partial > 500  # many walks ended at different blocks on different replicas


def test_leading_of_nothing() -> None:
    index = BlockIndex()
    assert index.leading([], 3) == [0, 0, 0]
    assert index.leading(chained_blocks([1, 2]), 2) == [0, 0]
    assert index.leading(chained_blocks([1]), 0) == []


def _naive(cache: PrefixCache, blocks: list[bytes]) -> int:
    return next((i for i, b in enumerate(blocks) if b not in cache._blocks), len(blocks))


def test_a_shared_prefix_known_from_the_tips_gives_the_full_walks_matches() -> None:
    """Most caches hold a swarm's shared context: the walk starts after the part their chain tips know whole, the
    others match on their own; the same matches as every cache's plain scan and as the walk from block 0."""
    rng = random.Random(9)
    shared = [rng.randrange(1 << 30) for _ in range(3 * TIP_STEP + 10)]
    chains = []
    for _ in range(200):
        own = [rng.randrange(1 << 30) for _ in range(rng.randrange(1, 2 * TIP_STEP))]
        cut = rng.choice([0, TIP_STEP - 1, TIP_STEP, TIP_STEP + 3, 2 * TIP_STEP - 1, 2 * TIP_STEP, *[len(shared)] * 6])
        chains.append(chained_blocks(shared[:cut] + own))  # some end at a tip, or a block before one
    caches = [PrefixCache(capacity_blocks=rng.randrange(5, 9) * TIP_STEP) for _ in range(16)]
    index = BlockIndex()
    for i, c in enumerate(caches):
        c.attach(index, 1 << i)
    shortcuts = 0
    for step in range(5000):
        chain = rng.choice(chains)
        if rng.random() < 0.25:
            c = rng.choice(caches)
            c.insert(chain, rng.randrange(2 * TIP_STEP, c.capacity_blocks + 50))
            continue
        k = index._k
        known = sum(c.bit for c in caches if k and c._tips.get(k) == chain[k - 1]) if k <= len(chain) else 0
        shortcuts += 2 * known.bit_count() >= len(caches)
        full = [0] * len(caches)
        index._walk(chain, 0, (1 << len(caches)) - 1, full)
        got = index.leading(chain, len(caches))
        assert got == [_naive(c, chain) for c in caches] == full, step
        if rng.random() < 0.5:
            rng.choice(caches).match(chain)  # an admission: its touch
    assert shortcuts > 1000
