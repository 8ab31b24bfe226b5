"""Clocks: the real CLOCK_MONOTONIC and a fake one for unit tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the time in integer nanoseconds."""

    def now_ns(self) -> int:
        """Current time in ns."""
        ...


class MonotonicClock:
    """CLOCK_MONOTONIC, so ledger stamps align with client records on the same machine."""

    def now_ns(self) -> int:
        """Current time in ns."""
        return time.monotonic_ns()


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.t = start_ns

    def now_ns(self) -> int:
        """Current time in ns."""
        return self.t

    def advance_s(self, seconds: float) -> int:
        """Move forward by `seconds`; returns the new time."""
        self.t += int(seconds * 1e9)
        return self.t
