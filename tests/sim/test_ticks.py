"""The step-time log lazy decoders settle from: its facts are those of a walk over every step."""

from __future__ import annotations

import random
from itertools import pairwise

from sim.ticks import TRIM_AT, TickLog


def _naive(times: list[int], since: int) -> tuple[int, int, int | None]:
    run = times[since:]  # times[k] is step k + 1's time: the steps after `since`
    gaps = [b - a for a, b in pairwise(run)]
    return run[0], run[-1], max(gaps) if gaps else None


def test_facts_are_the_walks_through_trims() -> None:
    rng = random.Random(5)
    log, times, t, oldest = TickLog(), [], 0, 0
    trimmed = 0
    for step in range(3 * TRIM_AT):
        t += rng.choice([1, 2, 3, 50, rng.randrange(1, 10_000)])
        log.push(t)
        times.append(t)
        if rng.random() < 0.01:
            oldest = rng.randrange(oldest, step + 1)  # no job settles from before it any more
            base = log.base
            if log.full():
                log.trim(oldest)
            trimmed += log.base != base
        for since in {oldest, rng.randrange(oldest, step + 1), step}:
            if since < step + 1:
                assert log.facts(since) == _naive(times, since), (step, since)
    assert log.last == len(times)
    assert trimmed >= 2
    assert len(log.times) < 2 * TRIM_AT
