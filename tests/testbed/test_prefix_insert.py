"""An insert leaves the newest run of blocks in place: the same cache and LRU order as the plain loops."""

from __future__ import annotations

import random

from testbed_helpers import PlainLru, chained_blocks

from testbed.prefix_cache import TIP_STEP, PrefixCache


def test_insert_after_its_match_is_the_plain_loops() -> None:
    """Admission then prefill (a match that touches, then the insert of the same prompt), other prompts' matches
    and inserts in between, evictions of every size: the cache is the plain loops' at every step."""
    rng = random.Random(8)
    shared = [rng.randrange(1 << 30) for _ in range(TIP_STEP + 9)]
    parts = []
    for _ in range(120):
        own = [rng.randrange(1 << 30) for _ in range(rng.randrange(0, 2 * TIP_STEP))]
        parts.append(shared[: rng.choice([0, 3, len(shared)])] + own)
    parts += [p + [rng.randrange(1 << 30) for _ in range(rng.randrange(1, 9))] for p in parts[::3]]  # next steps
    chains = [chained_blocks(p) for p in parts]
    capacity = 4 * TIP_STEP
    plain, fast = PlainLru(capacity), PrefixCache(capacity)
    kept = cut = 0
    for step in range(6000):
        chain = rng.choice(chains)
        op = rng.random()
        if op < 0.5:
            touch = op < 0.35
            assert fast.match(chain, touch) == plain.match(chain, touch), step
            if touch and rng.random() < 0.6:  # its prefill, at once
                op = 0.9
        if op >= 0.5:
            run = fast._run
            kept += run is not None and 0 < len(run) <= len(chain) and run == chain[: len(run)]
            limit = rng.choice([capacity, rng.randrange(len(chain), capacity + 1), rng.randrange(0, capacity)])
            cut += limit < len(chain)
            fast.insert(chain, limit)
            plain.insert(chain, limit)
        assert list(fast._blocks) == list(plain.blocks), step
    assert kept > 400  # the run was there to keep
    assert cut > 100  # evictions into the prompt's own blocks
