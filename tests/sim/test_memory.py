"""The simulator's memory follows what is in flight, not what already ran: an ended attempt frees what it held."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
from sim_helpers import SATURATED

from rushhour.scenarios import parse_scenario
from rushhour.sim.client import Exchange
from rushhour.sim.cluster import Cluster
from rushhour.sim.driver import Env
from rushhour.sim.loop import NS, Loop, VirtualClock
from rushhour.sim.run import SimOptions, simulate_scenario


class Held:
    """Something a deadline's callback holds (weak-referenceable, unlike the slotted Exchange)."""


def test_a_cancelled_timer_releases_its_arguments_and_never_runs() -> None:
    loop = Loop(VirtualClock(0))
    ran: list[str] = []
    held = Held()
    ref = weakref.ref(held)
    cancelled = loop.timer(5 * NS, lambda h: ran.append("cancelled"), held)
    loop.timer(6 * NS, ran.append, "kept")
    del held
    assert ref() is not None  # the pending event holds its argument ...
    cancelled.cancel()
    assert ref() is None  # ... until it is cancelled, long before its time
    loop.run(10 * NS)
    assert ran == ["kept"]
    assert loop.clock.t == 10 * NS


def test_a_timer_runs_in_time_order_with_plain_events() -> None:
    loop = Loop(VirtualClock(0))
    order: list[str] = []
    loop.at(2 * NS, order.append, "plain at 2")
    loop.timer(1 * NS, order.append, "timer at 1")
    loop.timer(2 * NS, order.append, "timer at 2")
    loop.run(3 * NS)
    assert order == ["timer at 1", "plain at 2", "timer at 2"]


def test_ended_attempts_are_not_kept_alive_by_their_client_deadlines(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The default client deadline is 600 s, far beyond this 23-s run: an attempt's deadline events are still
    # pending at the hard stop, and before they were cancelled every ended attempt was alive there (its
    # exchange, record, job and prompt blocks: a simulated hour's RSS grew to 6 GB).
    seen: dict[str, int] = {}
    real_stop = Env.stop

    def stop_and_count(self: Env) -> None:
        gc.collect()
        ended = [o for o in gc.get_objects() if isinstance(o, Exchange) and o.done.done]
        seen.update(ended=len(ended), in_flight=len(self.live), attempts=self.counters["attempts"])
        real_stop(self)

    monkeypatch.setattr(Env, "stop", stop_and_count)
    scenario = parse_scenario(SATURATED)
    assert scenario.resilience.timeouts.total_s >= 600
    simulate_scenario(scenario, "test", SimOptions(out_dir=tmp_path))
    assert seen["attempts"] > 100, seen  # the run made attempts that waited, so it had deadlines to cancel
    assert seen["ended"] == 0, seen


def test_a_run_leaves_no_cyclic_garbage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The run's collector sweeps only the youngest generation (sim.run.young_collections_only): a cycle that
    # outlives one sweep is never freed. An exchange and its job pointed at each other (the job's sink), so
    # every attempt that reached the engine stayed for good with its prompt blocks: a simulated hour of the
    # benchmark's realistic case grew to 6.1 GB. With the collector off from the start of the loop to the hard
    # stop, everything the run made and dropped is freed by reference counting, or counted here.
    seen: dict[str, int] = {}
    real_start, real_stop = Cluster.start, Env.stop

    def start_clean(self: Cluster) -> None:
        gc.collect()
        gc.disable()
        real_start(self)

    def stop_and_collect(self: Env) -> None:
        seen.update(cyclic=gc.collect(), attempts=self.counters["attempts"])
        gc.enable()
        real_stop(self)

    monkeypatch.setattr(Cluster, "start", start_clean)
    monkeypatch.setattr(Env, "stop", stop_and_collect)
    try:
        simulate_scenario(parse_scenario(SATURATED), "test", SimOptions(out_dir=tmp_path))
    finally:
        gc.enable()
    assert seen["attempts"] > 100, seen
    assert seen["cyclic"] == 0, seen
