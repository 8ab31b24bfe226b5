"""A circuit breaker per route: a thin adapter over pybreaker's state objects, driven by outcomes.

Why an adapter and not ``CircuitBreaker.call``: pybreaker guards a *call* and

- holds the breaker's ``RLock`` for the whole guarded call, which would serialise every greenlet of
  a route behind one streaming request (minutes) in a Locust process;
- learns failures from exceptions, while our attempts end as records (status, timeout flags);
- times the open period with ``datetime.now(UTC)`` (wall clock, not injectable, jumps with NTP);
- lets every caller through while half-open instead of exactly one probe.

So ``RouteBreaker`` keeps pybreaker as the state holder (``CircuitBreaker`` with its storage, its
``open``/``half_open``/``close`` transitions and its listener notifications, so a shared storage
could be plugged in later) and adds: outcome-driven counting, an injected monotonic clock, a single
half-open probe, and an ``on_change(route, old, new, cause)`` callback for ``BreakerRecord`` lines.
Locks are only held for counter updates, never across I/O, so it is safe under gevent (whose
monkey-patching turns the locks into cooperative ones) and under plain threads. ``on_change`` is
called after the lock is released.

States are reported as ``closed`` | ``open`` | ``half_open`` (the record contract's spelling;
pybreaker says ``half-open``).

Across processes (``loadgen/engine/breaker_share.py``): a process whose breaker opens or closes on
its own tells the master, which tells the others; they follow with ``force_open``/``force_close``
(cause ``shared: …``). A breaker opened that way holds for ``SHARED_HOLD`` × the reset timeout, so
the process that opened it sends the one probe and the others follow its verdict; they probe
themselves only if no verdict came by then (its process died).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pybreaker

from rushhour.loadgen.resilience import is_failure_key, outcome_key, retry_reason
from rushhour.records.record import RequestRecord

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"

SHARED = "shared: "  # the cause of a change that another process made (never relayed again)
SHARED_HOLD = 2.0

OnChange = Callable[[str, str, str, "str | None"], None]

_NAMES = {
    pybreaker.STATE_CLOSED: CLOSED,
    pybreaker.STATE_OPEN: OPEN,
    pybreaker.STATE_HALF_OPEN: HALF_OPEN,
}


def is_breaker_failure(record: RequestRecord) -> bool:
    """Does this attempt count against the route? Client timeouts, transport errors, in-band errors,
    cut streams, 408, 429, 529 and 5xx do; served responses, other 4xx and generator-side outcomes
    (not sent, cancelled) do not."""
    return is_failure_key(outcome_key(record)) and outcome_key(record) != "breaker_open"


class _Transitions(pybreaker.CircuitBreakerListener):
    """Collects pybreaker's state changes so the adapter can report them outside its lock."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, str]] = []

    def state_change(self, cb: Any, old_state: Any, new_state: Any) -> None:
        old = _NAMES.get(old_state.name, old_state.name) if old_state is not None else CLOSED
        self.pending.append((old, _NAMES.get(new_state.name, new_state.name)))


class RouteBreaker:
    """Consecutive-failure circuit breaker for one route.

    ``allow()`` before each attempt: False while open (fail fast: record an attempt with
    ``reason="breaker_open"`` and move to the next route). After ``reset_timeout_s`` the next
    ``allow()`` turns it half-open and lets exactly one probe through; its ``record_success`` closes
    the breaker, its ``record_failure`` opens it again. ``fail_max`` consecutive failures open it.
    A probe that ends without a verdict (cancelled, not sent) must call ``record_cancelled``.
    """

    def __init__(
        self,
        route: str,
        fail_max: int = 5,
        reset_timeout_s: float = 10.0,
        on_change: OnChange | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if fail_max < 1:
            raise ValueError("fail_max must be >= 1")
        if reset_timeout_s < 0:
            raise ValueError("reset_timeout_s must be >= 0")
        self.route = route
        self.fail_max = fail_max
        self.reset_timeout_s = reset_timeout_s
        self.on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._listener = _Transitions()
        self._storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        self._cb = pybreaker.CircuitBreaker(
            fail_max=fail_max,
            reset_timeout=reset_timeout_s,
            listeners=[self._listener],
            state_storage=self._storage,
            name=route,
        )
        self._opened_at: float | None = None
        self._hold_s: float | None = None  # the open period when another process opened it
        self._probe_out = False
        self.opens = 0  # how many times it opened (for summaries)
        self.rejected = 0  # attempts refused by allow()

    # ----------------------------------------------------------------- queries

    @property
    def state(self) -> str:
        """``closed`` | ``open`` | ``half_open``."""
        return _NAMES[self._cb.current_state]

    @property
    def failures(self) -> int:
        """Consecutive failures counted while closed."""
        return self._cb.fail_counter

    # ----------------------------------------------------------------- the protocol

    def allow(self) -> bool:
        """May an attempt be sent on this route now?"""
        with self._lock:
            state = self._cb.current_state
            if state == pybreaker.STATE_CLOSED:
                return True
            if state == pybreaker.STATE_OPEN:
                opened = self._opened_at if self._opened_at is not None else self._clock()
                hold = self._hold_s if self._hold_s is not None else self.reset_timeout_s
                if self._clock() - opened < hold:
                    self.rejected += 1
                    return False
                self._cb.half_open()
                self._probe_out = True
                pending = self._take()
            else:  # half-open: one probe at a time
                if self._probe_out:
                    self.rejected += 1
                    return False
                self._probe_out = True
                return True
        self._notify(pending, "reset_timeout")
        return True

    def record_success(self) -> None:
        """A served response on this route: resets the failure count; a half-open breaker closes."""
        with self._lock:
            state = self._cb.current_state
            if state == pybreaker.STATE_OPEN:
                return  # a late answer from before the breaker opened: the probe decides
            self._storage.reset_counter()
            if state == pybreaker.STATE_HALF_OPEN:
                self._probe_out = False
                self._cb.close()
            pending = self._take()
        self._notify(pending, "probe_succeeded")

    def record_failure(self, cause: str | None = None) -> None:
        """A failed attempt (timeout, transport, 5xx, 408/429/529, in-band error) on this route."""
        with self._lock:
            state = self._cb.current_state
            if state == pybreaker.STATE_OPEN:
                return  # already open; late failures do not extend the open period
            why: str | None
            if state == pybreaker.STATE_HALF_OPEN:
                self._probe_out = False
                self._trip()
                why = f"probe_failed: {cause}" if cause else "probe_failed"
            else:
                self._storage.increment_counter()
                if self._cb.fail_counter >= self.fail_max:
                    self._trip()
                why = f"{self.fail_max} consecutive failures, last: {cause}" if cause else None
            pending = self._take()
        self._notify(pending, why)

    def record_cancelled(self) -> None:
        """An allowed attempt ended without a verdict (cancelled, not sent): free the probe slot."""
        with self._lock:
            self._probe_out = False

    def force_open(self, cause: str) -> None:
        """Another process opened this route's breaker: open here too, for ``SHARED_HOLD`` × the reset
        timeout from now (an open breaker's period starts again)."""
        with self._lock:
            self._opened_at = self._clock()
            self._hold_s = self.reset_timeout_s * SHARED_HOLD
            if self._cb.current_state != pybreaker.STATE_OPEN:
                self._probe_out = False
                self.opens += 1
                self._cb.open()
            pending = self._take()
        self._notify(pending, cause)

    def force_close(self, cause: str) -> None:
        """Another process's probe succeeded: close here too."""
        with self._lock:
            if self._cb.current_state == pybreaker.STATE_CLOSED:
                return
            self._probe_out = False
            self._storage.reset_counter()
            self._cb.close()
            pending = self._take()
        self._notify(pending, cause)

    def record(self, record: RequestRecord) -> None:
        """Count a finished attempt by its raw facts (see ``is_breaker_failure``)."""
        key = outcome_key(record)
        if key is None:
            self.record_success()
        elif key in ("not_sent", "cancelled", "abandoned", "breaker_open"):  # no verdict on the route
            self.record_cancelled()
        elif is_failure_key(key):
            self.record_failure(retry_reason(record))
        else:
            # a 4xx that is the client's fault: the route answered, so it is alive
            self.record_success()

    # ----------------------------------------------------------------- internals

    def _trip(self) -> None:
        self._opened_at = self._clock()
        self._hold_s = None
        self.opens += 1
        self._cb.open()

    def _take(self) -> list[tuple[str, str]]:
        pending, self._listener.pending = self._listener.pending, []
        return pending

    def _notify(self, pending: list[tuple[str, str]], cause: str | None) -> None:
        if self.on_change is None:
            return
        for old, new in pending:
            if old != new:
                self.on_change(self.route, old, new, cause)

    def __repr__(self) -> str:
        return f"RouteBreaker({self.route!r}, state={self.state}, failures={self.failures})"
