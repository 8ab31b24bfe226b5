"""A replica's step times, kept so that a decoding job's token facts can be settled at its end, not at each step."""

from __future__ import annotations

from bisect import bisect_left
from operator import le, sub

TRIM_AT = 16_384  # step times kept before the ones no lazy job needs are dropped


class TickLog:
    """Step k's time, and the largest gap between consecutive steps from any step on to the last one.

    The gaps are a stack of (step, gap) with gaps strictly decreasing: the first entry at or after step q holds
    the largest gap of steps q..last (a later gap at least as large makes an earlier one irrelevant)."""

    __slots__ = ("base", "gap_steps", "gaps", "last", "times")

    def __init__(self) -> None:
        self.last = 0  # steps so far; the first step is 1
        self.base = 1  # step of times[0]
        self.times: list[int] = []
        self.gap_steps: list[int] = []
        self.gaps: list[int] = []

    def push(self, t: int) -> None:
        """Step ``last + 1`` happened at ``t``."""
        self.last += 1
        times = self.times
        if times:
            gap = t - times[-1]
            gaps, steps = self.gaps, self.gap_steps
            while gaps and gaps[-1] <= gap:
                gaps.pop()
                steps.pop()
            gaps.append(gap)
            steps.append(self.last)
        times.append(t)

    def extend(self, ts: list[int]) -> None:
        """``push`` each of ``ts`` in turn. A jump's steps grow longer one after another (each holds more KV): when
        the gaps after the first do not shrink, each one pops the one before it, so only the last is kept."""
        if len(ts) < 3:
            for t in ts:
                self.push(t)
            return
        gaps = list(map(sub, ts[1:], ts[:-1]))
        if not all(map(le, gaps, gaps[1:])):
            for t in ts:
                self.push(t)
            return
        self.push(ts[0])
        last = gaps[-1]
        stack, steps = self.gaps, self.gap_steps
        while stack and stack[-1] <= last:
            stack.pop()
            steps.pop()
        self.last += len(ts) - 1
        stack.append(last)
        steps.append(self.last)
        self.times.extend(ts[1:])

    def facts(self, since: int) -> tuple[int, int, int | None]:
        """(first, last token time, largest gap between them or None for one token) of one token at each step
        after step ``since`` up to the last one."""
        times, base = self.times, self.base
        first = times[since + 1 - base]
        if since + 1 == self.last:
            return first, first, None
        i = bisect_left(self.gap_steps, since + 2)
        return first, times[-1], self.gaps[i]

    def full(self) -> bool:
        """Enough steps have piled up to look for ones to forget (``trim``)."""
        return len(self.times) >= TRIM_AT

    def trim(self, oldest: int) -> None:
        """Forget the steps before ``oldest`` (no job settles from before it), when there are enough of them."""
        drop = oldest - self.base
        if drop < TRIM_AT // 4:
            return
        del self.times[:drop]
        self.base = oldest
        i = bisect_left(self.gap_steps, oldest)
        del self.gap_steps[:i]
        del self.gaps[:i]
