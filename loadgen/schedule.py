"""Pure scheduling maths: phases over time, open-loop arrivals, seeded RNGs, splitting work across workers."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from rushhour.scenarios.model import Arrival, Phase


def seeded_rng(seed: int, *parts: object) -> random.Random:
    """A ``random.Random`` from a stable hash of (seed, parts…): same inputs, same stream, every run.

    Python's ``hash()`` is salted per process, so a digest is used instead.
    """
    key = "\x1f".join(str(p) for p in (seed, *parts)).encode()
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))


def phase_index(phases: Sequence[Phase], elapsed_s: float) -> int | None:
    """Index of the phase running at ``elapsed_s`` from the anchor (None before 0 or after the end)."""
    if elapsed_s < 0:
        return None
    t = 0.0
    for i, phase in enumerate(phases):
        t += phase.duration
        if elapsed_s < t:
            return i
    return None


def phase_bounds(phases: Sequence[Phase]) -> list[tuple[float, float]]:
    """(start, end) seconds of each phase."""
    out, t = [], 0.0
    for phase in phases:
        out.append((t, t + phase.duration))
        t += phase.duration
    return out


def agents_scale(phase: Phase) -> float:
    return phase.agents_scale if phase.agents_scale is not None else phase.rate_scale


def unit_work(arrival: Arrival, rng: random.Random) -> float:
    """One inter-arrival gap at rate 1 (mean 1): exponential, gamma(shape) or constant."""
    if arrival.process == "poisson":
        return rng.expovariate(1.0)
    if arrival.process == "gamma":
        return rng.gammavariate(arrival.shape, 1.0 / arrival.shape)
    return 1.0


def next_arrival(
    t: float, work: float, base_rate: float, phases: Sequence[Phase], end_s: float | None = None
) -> float | None:
    """The time after ``t`` at which ``work`` units of rate-1 time have passed at the phased rate.

    The rate is ``base_rate × rate_scale`` of each phase (piecewise constant), so this is the exact
    time change of a non-homogeneous Poisson process; a phase at scale 0 simply pauses arrivals.
    None when the arrival falls after the last phase (or ``end_s``).
    """
    bounds = phase_bounds(phases)
    limit = bounds[-1][1] if bounds else 0.0
    if end_s is not None:
        limit = min(limit, end_s)
    for (start, end), phase in zip(bounds, phases, strict=True):
        if end <= t:
            continue
        cur = max(t, start)
        rate = base_rate * phase.rate_scale
        if rate > 0:
            needed = work / rate
            if cur + needed < end:
                result = cur + needed
                return result if result < limit else None
            work -= (end - cur) * rate
        t = end
    return None


def worker_share(total: float, workers: int) -> float:
    """A rate split evenly across ``workers`` processes (each runs an independent process at the share)."""
    return total / max(1, workers)


def worker_slots(total: int, workers: int, index: int) -> int:
    """Integer capacity split so the shares sum exactly to ``total`` (at least 1 each)."""
    base, extra = divmod(total, max(1, workers))
    return max(1, base + (1 if index < extra else 0))


def mine(index: int, worker_index: int, workers: int) -> bool:
    """Does item ``index`` (an agent, a trace row) belong to this worker? Round robin."""
    return index % max(1, workers) == worker_index


def scale_phases(phases: Sequence[Phase], total_s: float) -> list[Phase]:
    """Phases stretched or shrunk proportionally so that they last ``total_s`` in all."""
    current = sum(p.duration for p in phases)
    if current <= 0 or total_s <= 0:
        raise ValueError("a duration override must be > 0")
    factor = total_s / current
    return [p.model_copy(update={"duration": p.duration * factor}) for p in phases]

