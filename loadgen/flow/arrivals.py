"""Open-loop arrivals and the slots they fill, for every persona that has them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from rushhour.loadgen.flow.protocol import Host
from rushhour.loadgen.schedule import next_arrival

MIN_LIVE_SCALE = 1e-3  # a live scale of 0 would be a gap of forever: the controller never sets one


def open_loop(host: Host, rate: float, draw: Callable[[], float], persona: str = "") -> Iterator[tuple[int, float]]:
    """Arrival times at ``rate`` scaled by the phases and the live load scale (``host.load_scale``: the
    find-limit controller's), numbered from 1: (instance, t_s); the caller waits for each (``Wait``), then
    asks ``host.behind`` whether it is hopelessly late."""
    t, instance = 0.0, 0
    while not host.stopping:
        # the live scale is read as each gap is drawn: a change applies from the next arrival on
        work = draw() / max(host.load_scale(persona), MIN_LIVE_SCALE)
        arrival = next_arrival(t, work, rate, host.scenario.phases, host.scenario.duration_s)
        if arrival is None:
            return
        t = arrival
        instance += 1
        yield instance, t
