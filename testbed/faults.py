"""Fault schedule: which faults are active when (times in simulated seconds, scaled by speed)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from rushhour.testbed.config import FaultSpec


@dataclass
class ActiveFault:
    """A fault with absolute start/end in ns."""

    spec: FaultSpec
    start_ns: int
    end_ns: int | None

    @property
    def name(self) -> str:
        """Name recorded in the ledger."""
        return self.spec.name or self.spec.kind

    def active(self, now: int) -> bool:
        """True between start and end."""
        return self.start_ns <= now and (self.end_ns is None or now < self.end_ns)


class FaultSchedule:
    """Holds scheduled faults; answers what applies to an arrival or a replica now."""

    def __init__(self, speed: float, seed: int = 0) -> None:
        self.speed = speed
        self.faults: list[ActiveFault] = []
        self.rng = random.Random(seed)

    def add(self, spec: FaultSpec, origin_ns: int) -> ActiveFault:
        """Schedule `spec` relative to `origin_ns`."""
        start = origin_ns + int(spec.at_s / self.speed * 1e9)
        end = None if spec.duration_s is None else start + int(spec.duration_s / self.speed * 1e9)
        f = ActiveFault(spec, start, end)
        self.faults.append(f)
        return f

    def _active(self, kind: str, now: int) -> list[ActiveFault]:
        if not self.faults:  # asked at every arrival
            return []
        return [f for f in self.faults if f.spec.kind == kind and f.active(now)]

    def error_for_arrival(self, now: int) -> ActiveFault | None:
        """An `error` fault that fires for this arrival (by its rate)."""
        for f in self._active("error", now):
            if self.rng.random() < f.spec.rate:
                return f
        return None

    def fail_open_for_arrival(self, now: int) -> ActiveFault | None:
        """A `fail_open` fault that lets this arrival past flow control (by its rate)."""
        for f in self._active("fail_open", now):
            if self.rng.random() < f.spec.rate:
                return f
        return None

    def cut_for_arrival(self, now: int) -> ActiveFault | None:
        """A `stream_cut` fault that applies to this arrival (by its rate)."""
        for f in self._active("stream_cut", now):
            if self.rng.random() < f.spec.rate:
                return f
        return None

    def replica_state(self, index: int, now: int) -> tuple[bool, float, str | None]:
        """(up, slow factor, fault name) for a replica now."""
        up, factor, name = True, 1.0, None
        for f in self.faults:
            if not f.active(now) or (f.spec.replica is not None and f.spec.replica != index):
                continue
            if f.spec.kind == "replica_down":
                up, name = False, f.name
            elif f.spec.kind == "slow_replica":
                factor *= f.spec.factor
                name = name or f.name
        return up, factor, name
