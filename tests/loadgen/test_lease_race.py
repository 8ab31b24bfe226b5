"""Issue #15: a leased unit of budget must be reserved or given back, never left unused once the cap is reached.

Deterministic interleavings of the master's ``Ledger`` and the workers' ``LeasedBudget``: the asking sends are
gevent greenlets (as in a Locust worker), each worker's inbox is handled in batches as Locust's receive loop
does (several queued messages one after another, no send greenlet running in between), and the test decides
when the greenlets run. No sockets, no clocks, no timing luck.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.event
import pytest

from rushhour.loadgen.budget import BudgetGuard
from rushhour.loadgen.engine import lease
from rushhour.loadgen.engine.lease import LeasedBudget
from rushhour.loadgen.engine.ledger import MSG_ANSWER, MSG_ASK, MSG_REACHED, MSG_RECLAIM, MSG_RETURN, Ledger
from rushhour.scenarios.model import Budget


@dataclass
class Msg:
    data: Any
    node_id: str


class Inboxes:
    """The master's messages wait in each worker's socket until the test lets that worker's loop read them."""

    def __init__(self, budget: Budget, workers: int) -> None:
        self.ledger = Ledger(BudgetGuard(budget, leased=True).whole_limits(), workers)
        self.handlers: dict[str, dict[str, Any]] = {}
        self.inbox: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.trace: list[str] = []

    def budget(self, worker: str, budget: Budget) -> LeasedBudget:
        inboxes = self
        self.inbox[worker] = []

        class Runner:
            def register_message(self, kind: str, fn: Any) -> None:
                inboxes.handlers.setdefault(worker, {})[kind] = fn

            def send_message(self, kind: str, data: Any) -> None:  # the master answers at once (its loop is idle)
                if kind == MSG_ASK:
                    inboxes.post(inboxes.ledger.ask(worker, data, 0.0))
                elif kind == MSG_RETURN:
                    inboxes.post(inboxes.ledger.give_back(worker, data, 0.0))

        return LeasedBudget(BudgetGuard(budget, leased=True), Runner(), timeout_s=60.0).install()

    def post(self, out: list[tuple[str | None, str, dict[str, Any]]]) -> None:
        for worker, kind, data in out:
            for name in [worker] if worker is not None else list(self.inbox):
                self.inbox[name].append((kind, data))

    def read(self, worker: str) -> list[str]:
        """The worker's receive loop reads what is queued now, message after message (no yield between)."""
        batch, self.inbox[worker] = self.inbox[worker], []
        for kind, data in batch:
            self.trace.append(f"{worker} <- {kind.removeprefix('rh_budget_')}")
            self.handlers[worker][kind](msg=Msg(data, "master"))
        return [kind for kind, _ in batch]


@pytest.fixture(autouse=True)
def gevent_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting send is a greenlet, as in a Locust worker (there ``threading`` is gevent's)."""
    monkeypatch.setattr(lease, "threading", types.SimpleNamespace(Event=gevent.event.Event))


def _send(proc: LeasedBudget) -> gevent.Greenlet:
    g = gevent.spawn(proc.try_acquire, "t")
    gevent.sleep(0)  # it runs until it waits for the master's answer
    return g


def _requests(*procs: LeasedBudget) -> int:
    return sum(p.snapshot()["run"]["requests"] for p in procs)


def test_a_grant_then_reached_in_one_read_still_sends_the_granted_unit() -> None:
    """The 24-of-25 run: a unit is granted to a waiting send, and the cap is declared reached for the run;
    the worker's loop reads the grant and the "reached" one after the other, before the send resumes. The
    send was granted its unit: it must send it (the old code marked the scope reached first, the resumed
    send was refused, and the run ended one short with nothing to excuse it)."""
    budget = Budget(max_requests=4)
    wire = Inboxes(budget, 1)
    a, b, c = (wire.budget(w, budget) for w in "abc")
    # b leases 2 and uses 1 (1 spare); c leases the other 2 and uses both: nothing left to lease
    for name, proc, sends in (("b", b, 1), ("c", c, 2)):
        for _ in range(sends):
            g = _send(proc)
            wire.read(name)
            assert g.get(timeout=1) is True
    assert wire.ledger.available("run", "requests") == 0 and _requests(b) == 1 and _requests(c) == 2

    z = _send(c)  # c asks: a reclaim round goes to b and c
    x = _send(a)  # while the round runs, a and c ask too
    y = _send(c)
    wire.read("b")  # b gives its spare back: it is granted to c's first ask
    assert wire.read("c") == [MSG_RECLAIM, MSG_ANSWER]  # c has nothing spare; the grant arrives after
    # the round is over, a and c still wait: a second round; c's loop reads on before its send resumes
    assert wire.read("c") == [MSG_RECLAIM]
    wire.read("b")  # the second round ends (a has been granted the unit c did not keep, or nobody was)
    assert wire.ledger.counts.reached == {"run": "requests"}
    kinds_a = wire.read("a")
    assert kinds_a[-1] == MSG_REACHED
    wire.read("c")
    sent = [g.get(timeout=1) for g in (z, x, y)]
    # the cap, exactly: every unit the master leased was used (the old code: 3 of 4, nobody lost, no timeout)
    assert _requests(a, b, c) == 4, (sent, wire.trace, wire.ledger.account())
    assert sent.count(True) == 1 and wire.ledger.counts.round_timeouts == 0 and wire.ledger.counts.lost == 0
    for proc in (a, b, c):
        proc.finish()
    for w in "abc":
        wire.read(w)
    held = {w: wire.ledger.held.get(w, {}).get("run", {}).get("requests", 0.0) for w in "abc"}
    assert held == {"a": _requests(a), "b": 1, "c": _requests(c)}


def test_a_send_killed_while_its_grant_is_read_gives_the_unit_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grant is read (and reserved for the waiting send), then the process closes and kills that send before
    it resumes: the reservation is undone (requests counted = requests sent), the unit goes back at the end."""
    budget = Budget(max_requests=10)
    wire = Inboxes(budget, 1)
    a = wire.budget("a", budget)

    class KilledWhileWaiting(gevent.event.Event):
        def wait(self, timeout: float | None = None) -> bool:
            wire.read("a")  # the answer comes in ...
            raise gevent.GreenletExit  # ... and the send is killed before it resumes

    monkeypatch.setattr(lease, "threading", types.SimpleNamespace(Event=KilledWhileWaiting))
    with pytest.raises(gevent.GreenletExit):
        a.try_acquire("t")
    assert _requests(a) == 0 and a.snapshot()["run"]["in_flight"] == 0
    a.finish()
    assert wire.ledger.held["a"]["run"]["requests"] == 0


def test_an_ask_left_by_a_worker_that_ended_is_not_granted() -> None:
    """A worker ends (its sends killed, everything spare given back, ``final``) while one of its asks still
    waits at the master for a reclaim round: that ask must not be granted afterwards (nobody would use it, and
    the ledger would count it held by the gone worker: the run would stop short)."""
    ledger = Ledger({"run": {"requests": 2}}, 2)
    unit = {"run": {"requests": 1.0}}
    ledger.ask("b", {"id": 1, "needs": {"run": {"requests": 2}}, "units": unit}, 0.0)  # b holds both
    assert ledger.held["b"]["run"]["requests"] == 2
    out = ledger.ask("a", {"id": 1, "needs": unit, "units": unit}, 0.0)
    assert [(w, k) for w, k, _ in out] == [("b", MSG_RECLAIM)]
    ledger.give_back("a", {"round": None, "returned": {}, "final": True}, 0.0)  # a ends meanwhile
    out = ledger.give_back("b", {"round": ledger.round, "returned": unit}, 0.0)  # b used 1: 1 spare back
    assert not [d for w, k, d in out if w == "a" and k == MSG_ANSWER and d["granted"]], out
    out = ledger.ask("b", {"id": 2, "needs": unit, "units": unit}, 0.0)  # b's next send gets it
    assert [d["granted"] for w, k, d in out if k == MSG_ANSWER] == [{"run": {"requests": 1.0}}]
    assert ledger.available("run", "requests") == 0 and not ledger.counts.reached


def test_a_grant_while_others_wait_is_no_bigger_than_leaves_them_theirs() -> None:
    """Several asks are served in one pass after a round: a grant bigger than its ask's need must not take what
    the asks behind it need (they would be refused for the run with the extra units spare at the first asker,
    which the "reached" then keeps from being used)."""
    ledger = Ledger({"run": {"requests": 10}}, 1)
    unit = {"run": {"requests": 1.0}}
    ledger.ask("b", {"id": 1, "needs": {"run": {"requests": 10}}, "units": unit}, 0.0)  # b holds all 10
    ledger.ask("d", {"id": 1, "needs": unit, "units": unit}, 0.0)  # round 1: b is asked for its spare
    for i in range(8):  # eight asks arrive during round 1 (a's first, then c's)
        ledger.ask("a" if i == 0 else "c", {"id": 10 + i, "needs": unit, "units": unit}, 0.0)
    # b answers round 1 with 1 spare: d is served, the eight wait for a second round (b and d hold)
    out = ledger.give_back("b", {"round": 1, "returned": unit}, 0.0)
    assert {w for w, k, _ in out if k == MSG_RECLAIM} == {"b", "d"} and ledger.round == 2
    ledger.give_back("d", {"round": 2, "returned": {}}, 0.0)  # d uses its unit
    out = ledger.give_back("b", {"round": 2, "returned": {"run": {"requests": 8.0}}}, 0.0)  # b used 1: 8 back
    grants = [d["granted"]["run"]["requests"] for w, k, d in out if k == MSG_ANSWER and d["granted"]]
    assert grants == [1.0] * 8 and not ledger.counts.reached, out
