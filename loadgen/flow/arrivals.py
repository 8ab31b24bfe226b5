"""Open-loop arrivals and the slots they fill, for every persona that has them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from rushhour.loadgen.flow.protocol import Host
from rushhour.loadgen.schedule import next_arrival


def open_loop(host: Host, rate: float, draw: Callable[[], float]) -> Iterator[tuple[int, float]]:
    """Arrival times at ``rate`` scaled by the phases, numbered from 1: (instance, t_s); the caller waits
    for each (``Wait``), then asks ``host.behind`` whether it is hopelessly late."""
    t, instance = 0.0, 0
    while not host.stopping:
        arrival = next_arrival(t, draw(), rate, host.scenario.phases, host.scenario.duration_s)
        if arrival is None:
            return
        t = arrival
        instance += 1
        yield instance, t
