"""The prefix cache's radix tree holds the blocks, and their LRU order, of the plain loops (vLLM's tail-first order)."""

from __future__ import annotations

import random

import pytest
from testbed_helpers import PlainLru, chained_blocks

from rushhour.testbed.prefix_cache import PrefixCache


def _chains(rng: random.Random) -> list[list[int]]:
    """Prompts as a swarm's are: a shared context (whole, in part or not at all), a private part, next steps that
    extend a prompt, and sub-agents branching off one."""
    shared = [rng.randrange(1 << 30) for _ in range(70)]
    parts = []
    for _ in range(100):
        own = [rng.randrange(1 << 30) for _ in range(rng.randrange(0, 60))]
        parts.append(shared[: rng.choice([0, 1, 5, 30, 70, 70])] + own)
    parts += [p + [rng.randrange(1 << 30) for _ in range(rng.randrange(1, 9))] for p in parts[::3]]  # next steps
    parts += [[*p[: rng.randrange(len(p) + 1)], rng.randrange(1 << 30)] for p in parts[::5]]  # branches
    return [chained_blocks(p) for p in parts if p]


@pytest.mark.parametrize("seed", range(6))
def test_the_tree_is_the_plain_loops(seed: int) -> None:
    """Matches with and without a touch, inserts with evictions of every size (into the prompt's own blocks too):
    the same counts, the same blocks in the same LRU order, at every step."""
    rng = random.Random(seed)
    chains = _chains(rng)
    capacity = rng.choice([12, 120, 400])
    plain, tree = PlainLru(capacity), PrefixCache(capacity)
    cut = partial = 0
    for step in range(3000):
        chain = rng.choice(chains)
        op = rng.random()
        if op < 0.5:
            touch = op < 0.3
            want = plain.match(chain, touch=False)
            assert tree.known(chain) == want, step
            # a guess (placement passes another replica's answer) never changes it: each length, and past the end
            assert [tree.known(chain, g) for g in range(len(chain) + 2)] == [want] * (len(chain) + 2), step
            partial += 0 < want < len(chain)
            assert tree.match(chain, touch) == plain.match(chain, touch) == want, step
        else:
            limit = rng.choice([None, rng.randrange(0, capacity + 20)])
            cut += limit is not None and limit < len(chain)
            plain.insert(chain, limit)
            tree.insert(chain, limit)
        assert tree.lru_order() == list(plain.blocks), step
        assert len(tree) == len(plain.blocks)
    assert cut > 50  # evictions into the prompt's own blocks
    assert partial > 200  # prompts that leave the tree inside a run


def test_an_eviction_takes_the_tail_first() -> None:
    """vLLM frees a request's blocks in reverse order: a prompt's last block goes first, its prefix stays usable."""
    cache = PrefixCache(3)
    cache.insert([1, 2, 3])
    cache.insert([24])  # one block over: the tail of the older prompt goes
    assert cache.match([1, 2, 3]) == 2
    cache.insert([25])  # 1, 2 were touched by that match: 24 is the oldest now
    assert cache.match([24]) == 0
    assert cache.lru_order() == [2, 1, 25]
