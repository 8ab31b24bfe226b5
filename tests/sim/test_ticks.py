"""The step-time log lazy decoders settle from: its facts are those of a walk over every step."""

from __future__ import annotations

import random
from itertools import pairwise

from rushhour.sim.ticks import TRIM_AT, TickLog


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


def test_extend_is_push_after_push() -> None:
    """A batch of step times (a jump's: its gaps grow, or not: the loop then) leaves the log of pushing them one by
    one, gap stack included."""
    rng = random.Random(9)
    one, batch, t = TickLog(), TickLog(), 0
    monotone = 0
    for _ in range(2000):
        n = rng.randrange(0, 12)
        if rng.random() < 0.7:  # a jump: gaps that do not shrink after the first
            gap = rng.randrange(1, 50)
            ts = []
            for _ in range(n):
                t += gap
                ts.append(t)
                gap += rng.choice([0, 0, 1, 3])
            monotone += n >= 3
        else:
            ts = []
            for _ in range(n):
                t += rng.randrange(1, 100)
                ts.append(t)
        for x in ts:
            one.push(x)
        batch.extend(ts)
        assert (batch.last, batch.times, batch.gaps, batch.gap_steps) == (one.last, one.times, one.gaps, one.gap_steps)
    assert monotone > 500
