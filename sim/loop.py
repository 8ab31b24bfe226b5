"""The discrete-event core: a virtual clock, an event heap, futures and generator tasks."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

NS = 1_000_000_000


class VirtualClock:
    """The testbed's ``Clock`` in virtual time: it moves only when the loop pops an event."""

    def __init__(self, start_ns: int = 0) -> None:
        self.t = start_ns

    def now_ns(self) -> int:
        """Current virtual time in ns."""
        return self.t


@dataclass(slots=True)
class Sleep:
    """A task's request to resume at virtual time ``until_ns``."""

    until_ns: int


class Timer:
    """A cancellable event's callback: cancelling drops what it holds (the heap keeps only this empty cell until the
    loop sweeps such cells out)."""

    __slots__ = ("args", "fn", "loop")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], loop: Loop | None = None) -> None:
        self.fn: Callable[..., Any] | None = fn  # None once cancelled or run
        self.args = args
        self.loop = loop  # told of a cancel: it counts the dead cells in its heap

    def cancel(self) -> None:
        """The event will run as a no-op; its callback and arguments are released now."""
        loop = self.loop
        if loop is not None and self.fn is not None:
            loop.cancelled()
        self.fn, self.args, self.loop = None, (), None

    def fire(self) -> None:
        """The loop's callback: run the event unless it was cancelled."""
        fn = self.fn
        if fn is not None:
            self.fn = self.loop = None
            fn(*self.args)
            self.args = ()


def _fire(timer: Timer) -> None:
    """A timer's event (one function for all of them: the loop's sweep knows their cells by it)."""
    timer.fire()


class Future:
    """A value that arrives later; tasks waiting on it resume (at the same virtual instant) when it does."""

    __slots__ = ("_waiters", "done", "value")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self._waiters: list[Callable[[Any], None]] = []

    def resolve(self, value: Any = None) -> None:
        """Set the value once; later calls are ignored."""
        if self.done:
            return
        self.done, self.value = True, value
        waiters, self._waiters = self._waiters, []
        for fn in waiters:
            fn(value)

    def add(self, fn: Callable[[Any], None]) -> None:
        """Call ``fn(value)`` when resolved (at once if it already is)."""
        if self.done:
            fn(self.value)
        else:
            self._waiters.append(fn)


_SWEEP_MIN = 4096  # a heap smaller than this is not worth a sweep

Coroutine = Generator[Any, Any, Any]  # yields Sleep | Future | list[Future]; returns the task's result


class Loop:
    """Events ordered by (time, insertion): callbacks at the same instant run first-come first-served."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self.events = 0  # callbacks run so far (the speed benchmark's events/s)
        self._dead = 0  # cancelled timers' cells in the heap, at most (a cell popped meanwhile is not subtracted)

    def at(self, t_ns: int, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` at ``t_ns`` (never in the past: a late time runs now)."""
        heapq.heappush(self._heap, (max(t_ns, self.clock.t), next(self._seq), fn, args))

    def timer(self, t_ns: int, fn: Callable[..., Any], *args: Any) -> Timer:
        """``at`` for an event that is usually cancelled (a client deadline): cancelling it frees ``args`` at
        once, where a plain event would keep them alive in the heap until its time."""
        timer = Timer(fn, args, self)
        self.at(t_ns, _fire, timer)
        return timer

    def cancelled(self) -> None:
        """A timer in the heap was cancelled. Client deadlines are nearly all cancelled long before they are due (600 s
        by default, an answer within seconds): left in the heap, they were four in five of its cells in the realistic
        benchmark case, and every event's pop went through them. Once the dead may be half the heap, they go; the
        live keep their (time, seq) keys, so the same events run in the same order."""
        self._dead += 1
        heap = self._heap
        if self._dead * 2 > len(heap) >= _SWEEP_MIN:
            heap[:] = [e for e in heap if e[2] is not _fire or e[3][0].fn is not None]
            heapq.heapify(heap)
            self._dead = 0

    def soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` at the current instant, after what is already due now."""
        self.at(self.clock.t, fn, *args)

    def run(self, until_ns: int) -> None:
        """Pop events until the heap is empty or the next one is after ``until_ns``; the clock ends there."""
        heap, clock, pop = self._heap, self.clock, heapq.heappop
        n = 0
        while heap and heap[0][0] <= until_ns:
            t, _, fn, args = pop(heap)
            clock.t = t
            fn(*args)
            n += 1
        self.events += n
        clock.t = max(clock.t, until_ns)

    def spawn(self, coro: Coroutine) -> Future:
        """Start a generator task now; its Future resolves with the generator's return value."""
        done = Future()
        self._step(coro, done, None)
        return done

    def _step(self, coro: Coroutine, done: Future, value: Any) -> None:
        try:
            cmd = coro.send(value)
        except StopIteration as stop:
            done.resolve(stop.value)
            return
        if isinstance(cmd, Sleep):
            self.at(cmd.until_ns, self._step, coro, done, None)
        elif isinstance(cmd, Future):
            # resume through the heap, never from inside whoever resolved the future (no deep recursion)
            if cmd.done:
                self.at(self.clock.t, self._step, coro, done, cmd.value)
            else:
                cmd.add(lambda v: self.soon(self._step, coro, done, v))
        elif isinstance(cmd, list):
            self._join(coro, done, cmd)
        else:  # pragma: no cover - a programming error in a persona
            raise TypeError(f"a simulated task yielded {cmd!r}")

    def _join(self, coro: Coroutine, done: Future, futures: list[Future]) -> None:
        left = [len(futures)]

        def one(_: Any) -> None:
            left[0] -= 1
            if left[0] == 0:
                self.soon(self._step, coro, done, [f.value for f in futures])

        if not futures:
            self.soon(self._step, coro, done, [])
        for f in futures:
            f.add(one)
