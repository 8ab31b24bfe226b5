"""The cyclic garbage collector kept to short pauses while the reactor reads streams.

Measured (benchmarks/loadgen.py, 2,000 streams, one process): the collector's full (gen-2) sweeps over the
~150,000 objects of a loaded process paused the loop 35-67 ms of CPU (88-202 ms of wall time on a busy
core); a stream whose first token landed in such a pause was read with several tokens at once, and the
kernel's stamp of a TCP read is its newest segment's, so its first token was stamped at a later token's
arrival (the benchmark's TTFT error p99 of ~100 ms at 2,000 streams). An attempt frees its objects by
reference counting (tests/loadgen/test_wire_fastpath.py: none is cyclic garbage), so while streams are in
flight the collector keeps to young sweeps, and every survivor moves to the permanent generation
(``gc.freeze``, O(1)) every FREEZE_S: no sweep sees more than one interval's worth of objects. Frozen
objects are still freed by reference counting; cycles frozen before they became garbage (an error kept
with its traceback) wait for a full sweep: once the reactor has had no stream for IDLE_S, or when the
heap has grown REGROW times since the last full sweep (so that garbage stays bounded), measured every
REGROW_CHECK_S by ``sys.getallocatedblocks()`` (it walks pymalloc's arenas: 2.4 % of a loaded client's CPU
samples when read at every tick), never ``gc.get_freeze_count()``, which walks every frozen object: at each
tick it cost 11 µs per event at 2,000 streams, once a second still 5.9 % of the samples.
A process that turned the collector off (``gc.disable()``) is left alone. The testbed keeps the same policy
for its server (testbed/cli.py ``gc_policy``).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable

import gevent

FREEZE_S = 0.05  # survivors of young sweeps are frozen this often
YOUNG_THRESHOLD = 2000  # allocations between young sweeps (well under a millisecond each)
IDLE_S = 1.0  # no stream for this long: one full sweep, the collector's own settings back
REGROW = 2.0  # a heap this many times its size (allocated blocks) after the last full sweep is swept at once
REGROW_CHECK_S = 1.0  # how often the heap is measured
MIN_SWEPT = 100_000  # … but never for fewer blocks than this (a small heap grows fast at start)
_NEVER = 1_000_000_000  # gen-1 and gen-2 thresholds while streams are in flight: never by count


class Collector:
    """This process's collector policy while ``busy()`` (the reactor has streams); one per process."""

    def __init__(self, busy: Callable[[], bool]) -> None:
        self._busy = busy
        self._glet: gevent.Greenlet | None = None
        self._saved: tuple[int, ...] | None = None
        self._refreeze = False  # the process had frozen objects before (Locust freezes before it forks workers)
        self.full_sweeps = 0  # for tests and the benchmark: sweeps of the whole heap while it ran

    @property
    def running(self) -> bool:
        """Whether the policy is in force."""
        return self._glet is not None and not self._glet.dead

    def start(self) -> None:
        """Take over the collector (idempotent); nothing if the process turned it off."""
        if self.running or not gc.isenabled():
            return
        self._saved = gc.get_threshold()
        self._refreeze = gc.get_freeze_count() > 0  # walks the frozen heap: once per start, never per tick
        gc.freeze()  # what is alive now (imports, Locust, the users) is never swept again while streams run
        gc.set_threshold(YOUNG_THRESHOLD, _NEVER, _NEVER)
        self._glet = gevent.spawn(self._run)

    def _run(self) -> None:
        swept_at = sys.getallocatedblocks()
        idle_ticks = 0
        busy_ticks = 0
        check_every = max(1, round(REGROW_CHECK_S / FREEZE_S))
        try:
            while True:
                gevent.sleep(FREEZE_S)
                if not gc.isenabled():
                    return  # turned off meanwhile: nothing frozen from now on
                if self._busy():
                    idle_ticks = 0
                    busy_ticks += 1
                    gc.freeze()
                    if busy_ticks % check_every == 0 and sys.getallocatedblocks() > max(MIN_SWEPT, REGROW * swept_at):
                        swept_at = self._sweep()
                else:
                    idle_ticks += 1
                    if idle_ticks * FREEZE_S >= IDLE_S:
                        return
        finally:
            self._release()

    def _sweep(self) -> int:
        """One full sweep of everything, frozen again after; the heap's size (allocated blocks)."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.full_sweeps += 1
        return sys.getallocatedblocks()

    def _release(self) -> None:
        """The collector as it was: everything swept once, the saved thresholds back."""
        gc.unfreeze()
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
        if gc.isenabled():
            gc.collect()
        if self._refreeze:  # frozen again, as the process had it (a forked worker's shared pages stay untouched
            gc.freeze()  # by later sweeps; this one touched them once)


_COLLECTOR: tuple[int, Collector] | None = None


def collector(busy: Callable[[], bool]) -> Collector:
    """This process's collector policy (made on first use; a forked process makes its own)."""
    global _COLLECTOR
    pid = os.getpid()
    if _COLLECTOR is None or _COLLECTOR[0] != pid:
        _COLLECTOR = (pid, Collector(busy))
    return _COLLECTOR[1]
