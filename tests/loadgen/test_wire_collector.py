"""The collector policy of a load process: no full sweep while the reactor reads streams, garbage swept after."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from test_wire_client import attempt
from wire_fakes import FakeServer

from rushhour.loadgen.engine.wire import collector as policy
from rushhour.loadgen.engine.wire.client import Timeouts
from rushhour.loadgen.engine.wire.reactor import reactor

pytestmark = [pytest.mark.timeout(120), pytest.mark.serial]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.close()


class _Node:
    """A tracked object in a reference cycle with itself."""

    def __init__(self) -> None:
        self.me = self


def _idle() -> None:
    """Wait (by state, not by time) until no policy is in force: the reactor's streams are done for IDLE_S."""
    while reactor()._collector.running:
        gevent.sleep(policy.FREEZE_S)


def _full_sweeps_while(work: Any) -> int:
    """Full (gen-2) collections while ``work`` runs in a greenlet and this one keeps new objects alive."""
    sweeps = 0

    def count(phase: str, info: dict[str, Any]) -> None:
        nonlocal sweeps
        if phase == "start" and info["generation"] == 2:
            sweeps += 1

    kept: list[list[int]] = []
    gc.collect()
    # past the default thresholds' trigger: a quarter of the long-lived heap, after 100 young sweeps
    grow = max(200_000, len(gc.get_objects()))
    gc.callbacks.append(count)
    try:
        glet = gevent.spawn(work)
        for _ in range(2000):  # until the request is on the wire and its stream sits in the reactor
            if reactor().busy():
                break
            gevent.sleep(0.001)
        while len(kept) < grow:  # survivors, as a loaded process holds: users, records, Locust's stats
            kept.extend([] for _ in range(5000))
            gevent.sleep(0)
        glet.join()
    finally:
        gc.callbacks.remove(count)
    return sweeps


def test_no_full_sweep_while_the_reactor_reads_a_stream(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    _idle()
    monkeypatch.setattr(policy, "REGROW", 1e9)  # the sweep of a doubled frozen heap is the next test's
    assert gc.isenabled()
    # control: the same growth with no stream in flight is swept in full by the default thresholds
    assert _full_sweeps_while(lambda: gevent.sleep(0.05)) > 0
    gc.collect()
    before = gc.get_threshold()
    rec = None

    def read() -> None:
        nonlocal rec
        rec, pool = attempt(server.port, "slowtokens", timeouts=Timeouts(connect_s=2, ttft_s=10, total_s=20))
        pool.close()

    assert _full_sweeps_while(read) == 0
    assert rec is not None and rec.complete and rec.tokens == 30
    _idle()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0  # the process's settings are back


def _frozen(obj: object) -> bool:
    """Moved to the permanent generation: no sweep but a full one after ``gc.unfreeze`` sees it."""
    return gc.is_tracked(obj) and all(o is not obj for o in gc.get_objects())


def _streams_while(glet: gevent.Greenlet, port: int) -> None:
    """Keep a stream in the reactor (one after another) until ``glet`` is done."""
    while not glet.dead:
        rec, pool = attempt(port, "slowtokens", timeouts=Timeouts(connect_s=2, ttft_s=10, total_s=20))
        pool.close()
        assert rec.complete


def test_cyclic_garbage_frozen_in_flight_is_swept_when_idle(server: FakeServer) -> None:
    _idle()
    gc.collect()
    ref: list[weakref.ref[_Node]] = []

    def make_garbage() -> None:
        node = _Node()
        ref.append(weakref.ref(node))
        for _ in range(40):  # the policy freezes survivors while streams run
            if _frozen(node):
                break
            gevent.sleep(policy.FREEZE_S)
        del node  # garbage now, but frozen: no young sweep sees it

    glet = gevent.spawn(make_garbage)
    _streams_while(glet, server.port)
    assert ref[0]() is not None  # still there while streams run
    _idle()
    assert ref[0]() is None  # the idle sweep freed it


def test_a_frozen_heap_that_doubles_is_swept_while_streams_run(server: FakeServer,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _idle()
    monkeypatch.setattr(policy, "MIN_SWEPT", 0)
    monkeypatch.setattr(policy, "REGROW", 1.2)  # a fifth more: a big test process need not double its heap here
    monkeypatch.setattr(policy, "REGROW_CHECK_S", policy.FREEZE_S)
    gc.collect()
    coll = reactor()._collector
    sweeps = coll.full_sweeps
    ref: list[weakref.ref[_Node]] = []
    kept: list[Any] = []

    def grow() -> None:
        node = _Node()
        ref.append(weakref.ref(node))
        for _ in range(40):
            if _frozen(node):
                break
            gevent.sleep(policy.FREEZE_S)
        del node
        for _ in range(100):
            if coll.full_sweeps > sweeps:
                break  # the frozen heap grows until the policy sweeps it
            kept.extend([] for _ in range(max(5000, sys.getallocatedblocks() // 20)))
            gevent.sleep(policy.FREEZE_S)

    glet = gevent.spawn(grow)
    _streams_while(glet, server.port)
    assert coll.full_sweeps > sweeps and coll.running  # swept under load, not only when idle
    assert ref[0]() is None  # the frozen cycle went with it
    kept.clear()
    _idle()


def test_a_process_that_turned_the_collector_off_is_left_alone(server: FakeServer) -> None:
    _idle()
    before = gc.get_threshold()
    gc.disable()
    try:
        rec, pool = attempt(server.port, "ok")
        pool.close()
        assert rec.complete
        assert not reactor()._collector.running
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_a_process_that_froze_its_heap_has_it_frozen_again(server: FakeServer) -> None:
    """Locust freezes its heap before it forks workers (copy-on-write): the policy's release leaves it frozen."""
    _idle()
    gc.collect()
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        rec, pool = attempt(server.port, "ok")
        pool.close()
        assert rec.complete and reactor()._collector.running
        _idle()
        assert gc.get_freeze_count() >= before * 0.9  # frozen again (what died meanwhile was freed)
    finally:
        gc.unfreeze()
