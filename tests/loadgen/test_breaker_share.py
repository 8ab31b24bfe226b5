"""One breaker per route across processes: an own change travels through the master, the others follow."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rushhour.loadgen.breaker import CLOSED, HALF_OPEN, OPEN, SHARED, SHARED_HOLD, RouteBreaker
from rushhour.loadgen.engine.breaker_share import MASTER_LOG, BreakerRelay, BreakerShare, relayed


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Msg:
    data: Any
    node_id: str


@dataclass
class Client:
    id: str


class Net:
    """A master and its workers on one message bus, delivered at once."""

    def __init__(self, run_dir: Path, workers: list[str]) -> None:
        self.handlers: dict[str, dict[str, Any]] = {name: {} for name in ["master", *workers]}
        self.clients = type("Clients", (), {"all": [Client(w) for w in workers]})()
        self.relay = BreakerRelay(self.runner("master"), run_dir).install()

    def runner(self, name: str) -> Any:
        net = self

        class Runner:
            clients = net.clients

            def register_message(self, kind: str, fn: Any) -> None:
                net.handlers[name][kind] = fn

            def send_message(self, kind: str, data: Any, client_id: str | None = None) -> None:
                target = "master" if name != "master" else client_id
                assert target is not None
                net.handlers[target][kind](msg=Msg(data, name))

        return Runner()


def process(net: Net, name: str, clock: Clock) -> tuple[RouteBreaker, list[tuple[str, str, str | None]]]:
    lines: list[tuple[str, str, str | None]] = []
    breakers: dict[str, RouteBreaker] = {}
    share = BreakerShare(net.runner(name), breakers, name).install()

    def on_change(route: str, old: str, new: str, cause: str | None) -> None:
        lines.append((new, old, cause))
        share.changed(route, new, cause)

    breakers["primary"] = RouteBreaker("primary", 2, 10.0, on_change, clock=clock)
    return breakers["primary"], lines


def test_an_open_travels_to_every_other_process_and_its_probe_decides_for_all(tmp_path: Path) -> None:
    clock = Clock()
    net = Net(tmp_path, ["a", "b", "c"])
    a, _ = process(net, "a", clock)
    b, b_lines = process(net, "b", clock)
    c, _ = process(net, "c", clock)
    a.record_failure("timeout")
    a.record_failure("timeout")
    assert a.state == b.state == c.state == OPEN  # b and c never failed themselves
    assert b_lines == [(OPEN, CLOSED, f"{SHARED}primary open on a: 2 consecutive failures, last: timeout")]
    assert not b.allow() and not c.allow()
    # after the reset timeout the opener sends the one probe; the others still hold (no probe of theirs)
    clock.t += 10.5
    assert a.allow() and a.state == HALF_OPEN
    assert not b.allow() and b.state == OPEN
    a.record_success()  # the probe succeeded: closed everywhere
    assert a.state == b.state == c.state == CLOSED
    assert b_lines[-1][0] == CLOSED and b_lines[-1][2].startswith(f"{SHARED}primary closed on a")
    log = [json.loads(line) for line in (tmp_path / MASTER_LOG).read_text().splitlines()]
    assert [(e["who"], e["state"]) for e in log] == [("a", OPEN), ("a", CLOSED)]  # half_open stays local


def test_a_failed_probe_keeps_the_others_open_and_they_probe_if_the_opener_is_silent(tmp_path: Path) -> None:
    clock = Clock()
    net = Net(tmp_path, ["a", "b"])
    a, _ = process(net, "a", clock)
    b, b_lines = process(net, "b", clock)
    a.record_failure("503")
    a.record_failure("503")
    clock.t += 10.5
    assert a.allow()
    a.record_failure("503")  # the probe failed: a opens again, b's open period starts again
    assert a.state == b.state == OPEN
    clock.t += 10.0 * SHARED_HOLD - 0.5
    assert not b.allow()
    clock.t += 1.0  # no verdict came from a within the hold: b probes itself
    assert b.allow() and b.state == HALF_OPEN
    assert sum(1 for line in b_lines if line[0] == OPEN) == 1  # one line: it was open all along


def test_only_own_opens_and_closes_are_relayed() -> None:
    assert relayed(OPEN, "2 consecutive failures, last: timeout")
    assert relayed(CLOSED, "probe_succeeded")
    assert not relayed(HALF_OPEN, "reset_timeout")
    assert not relayed(OPEN, f"{SHARED}primary open on a")


def test_a_follow_for_an_unknown_route_or_a_bad_message_is_ignored(tmp_path: Path) -> None:
    clock = Clock()
    net = Net(tmp_path, ["a"])
    a, lines = process(net, "a", clock)
    net.handlers["a"]["rh_breaker_follow"](msg=Msg({"route": "nope", "state": OPEN}, "master"))
    net.handlers["a"]["rh_breaker_follow"](msg=Msg("garbage", "master"))
    net.handlers["master"]["rh_breaker"](msg=Msg({"route": 3, "state": "??"}, "a"))
    assert a.state == CLOSED and lines == []
