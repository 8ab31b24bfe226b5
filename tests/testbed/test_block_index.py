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
