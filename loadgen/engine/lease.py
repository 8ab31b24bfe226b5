"""One budget across Locust processes: leases asked from the master over Locust's custom messages.

Worker side, ``LeasedBudget``: the process's ``BudgetGuard`` is leased (its limits are what the
master granted). When a send does not fit, the greenlet asks the master (``MSG_ASK``) and waits for
the answer (a grant, or "the cap is reached for the run"); the grant is reserved for that send as
the answer is read, before the process reads its next message (issue #15: a "reached" read right
after it would otherwise refuse the resumed send, and a reclaim would take its unit back). A
reclaim is answered with what is not used; at its end the process gives everything unused back.
Master side, ``LedgerHost``: runs the pure ``Ledger`` (``loadgen/engine/ledger.py``) on the
master's message loop and writes its account to ``budget-master.json`` in the run folder (the
runner merges it into run.json ``budget_usage``).

Same for ``--processes N`` (Locust's forked workers and their master) and ``rushhour worker``.
Standard library only and duck-typed on Locust's runner (``register_message``/``send_message``,
``clients``); in the Locust child ``threading`` and ``time.sleep`` are gevent's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rushhour.loadgen.budget import BudgetGuard, Shortfall
from rushhour.loadgen.engine.ledger import (
    MSG_ANSWER,
    MSG_ASK,
    MSG_REACHED,
    MSG_RECLAIM,
    MSG_RETURN,
    Ledger,
)
from rushhour.loadgen.ship import MASTER_ACCOUNT, registered

# no answer from the master by then: refuse (fail closed: never spend unasked); above the ledger's
# ROUND_TIMEOUT_S, so an ask waiting for a slow holder's reclaim answer still gets the master's verdict
ASK_TIMEOUT_S = 30.0
UNREACHABLE = "master_unreachable"
RESERVED = "_reserved"  # in a waiting send's answer: the reservation made for it when its grant was read

Request = tuple[str, int, int]  # (tier, expected prompt tokens, expected output tokens) of a waiting send


class LeasedBudget:
    """A worker's budget guard that asks the master for leases; the guard's API for the attempts."""

    def __init__(self, guard: BudgetGuard, runner: Any, timeout_s: float = ASK_TIMEOUT_S) -> None:
        self.guard = guard
        self.runner = runner
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, dict[str, Any], Request]] = {}
        self.asks = 0
        self.wait_s_max = 0.0
        self.wait_s_total = 0.0
        self.returned = 0
        # called with the tier (None: the whole run) when the master says a cap is reached for the run
        self.on_reached_scope: Callable[[str | None], None] | None = None

    def install(self) -> LeasedBudget:
        self.runner.register_message(MSG_ANSWER, self.on_answer)
        self.runner.register_message(MSG_RECLAIM, self.on_reclaim)
        self.runner.register_message(MSG_REACHED, self.on_reached)
        return self

    # ----------------------------------------------------------------- the guard's protocol

    def try_acquire(self, tier: str, expected_prompt_tokens: int = 0, expected_output_tokens: int = 0) -> bool:
        """Reserve one request; when this process's lease is short, ask the master (the greenlet waits)."""
        request = (tier, expected_prompt_tokens, expected_output_tokens)
        while True:
            verdict = self.guard.reserve(*request)
            if isinstance(verdict, bool):
                return verdict
            got = self._ask(verdict, request)
            if got is not None:
                return got

    def settle(self, tier: str, prompt_tokens: int, output_tokens: int, **expected: int | None) -> None:
        self.guard.settle(tier, prompt_tokens, output_tokens, **expected)

    def release(self, tier: str, expected_prompt_tokens: int = 0, expected_output_tokens: int = 0) -> None:
        self.guard.release(tier, expected_prompt_tokens, expected_output_tokens)

    def stop_scope(self, tier: str | None) -> str | None:
        return self.guard.stop_scope(tier)

    def detail(self, tier: str | None = None) -> dict[str, Any]:
        return {**self.guard.detail(tier), "enforcement": "leased from the master"}

    def snapshot(self) -> dict[str, Any]:
        return {**self.guard.snapshot(), "lease": {
            "asks": self.asks, "wait_ms_max": round(self.wait_s_max * 1e3, 3),
            "wait_ms_total": round(self.wait_s_total * 1e3, 3), "returns": self.returned,
        }}

    def cost(self, tier: str, prompt_tokens: int, output_tokens: int) -> float:
        return self.guard.cost(tier, prompt_tokens, output_tokens)

    def finish(self) -> None:
        """This process sends no more: everything it was leased and did not use goes back."""
        self._give_back(None, None, final=True)

    # ----------------------------------------------------------------- messages

    def _ask(self, short: Shortfall, request: Request) -> bool | None:
        """Ask the master for what is missing: True when its grant was reserved for this send, False when it
        refused (or never answered), None when granted but the send still does not fit (ask again)."""
        ask_id = next(self._ids)
        got, answer = threading.Event(), dict[str, Any]()
        self._waiting[ask_id] = (got, answer, request)
        started = time.monotonic()
        self.asks += 1
        try:
            self.runner.send_message(MSG_ASK, {"id": ask_id, "needs": short.needs, "units": short.units})
            answered = got.wait(self.timeout_s)
        except BaseException:  # killed while waiting (the process closes): what was reserved for it is not sent
            if answer.get(RESERVED) is True:
                self.guard.release(*request)
            raise
        finally:
            self._waiting.pop(ask_id, None)
            waited = time.monotonic() - started
            self.wait_s_total += waited
            self.wait_s_max = max(self.wait_s_max, waited)
        reserved = answer.get(RESERVED)
        if isinstance(reserved, bool):  # the grant was read (even as the wait timed out): its verdict stands
            return reserved
        if not answered:
            for key in short.needs:  # without the master nothing more is spent
                self.guard.mark_reached(key, UNREACHABLE)
            return False
        return None if answer.get("granted") and not answer.get("reached") else False

    def on_answer(self, msg: Any, **_: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        for key, amounts in (data.get("granted") or {}).items():
            if isinstance(amounts, dict):
                self.guard.grant(str(key), amounts)
        for key, limit in (data.get("reached") or {}).items():
            self.guard.mark_reached(str(key), str(limit))
        waiting = self._waiting.get(data.get("id", -1))
        if waiting is not None:
            got, answer, request = waiting
            answer.update(data)
            if data.get("granted") and not data.get("reached"):
                # reserve now, not when the send resumes: the next message read (a "reached" for the run, a
                # reclaim) may come before it does, and would refuse it or take its unit back (issue #15)
                verdict = self.guard.reserve(*request)
                if isinstance(verdict, bool):
                    answer[RESERVED] = verdict
            got.set()

    def on_reclaim(self, msg: Any, **_: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        scopes = data.get("scopes")
        self._give_back(data.get("round"), [str(s) for s in scopes] if isinstance(scopes, list) else None)

    def on_reached(self, msg: Any, **_: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        for key, limit in (data.get("scopes") or {}).items():
            self.guard.mark_reached(str(key), str(limit))
            if self.on_reached_scope is not None:  # stop now, not at this process's next send
                self.on_reached_scope(None if key == "run" else str(key).removeprefix("tier:"))

    def _give_back(self, round_no: Any, scopes: list[str] | None, final: bool = False) -> None:
        returned = self.guard.take_spare(scopes)
        self.returned += 1
        with contextlib.suppress(Exception):  # the master is gone: nothing to give back to
            self.runner.send_message(MSG_RETURN, {"round": round_no, "returned": returned, "final": final})


class LedgerHost:
    """The master's end: the ledger on Locust's message loop, a timer for reclaim rounds and lost workers."""

    def __init__(self, runner: Any, ledger: Ledger, run_dir: Path) -> None:
        self.runner = runner
        self.ledger = ledger
        self.run_dir = Path(run_dir)
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def install(self) -> LedgerHost:
        self.runner.register_message(MSG_ASK, self.on_ask)
        self.runner.register_message(MSG_RETURN, self.on_return)
        threading.Thread(target=self._loop, name="rh-ledger", daemon=True).start()
        return self

    def on_ask(self, msg: Any, **_: Any) -> None:
        if not registered(self.runner, msg.node_id):  # the ledger leases only to the run's workers
            return
        with self._lock:
            out = self.ledger.ask(str(msg.node_id), msg.data, time.monotonic())
        self._send(out)

    def on_return(self, msg: Any, **_: Any) -> None:
        if not registered(self.runner, msg.node_id):
            return
        with self._lock:
            out = self.ledger.give_back(str(msg.node_id), msg.data, time.monotonic())
        self._send(out)

    def _send(self, out: list[tuple[str | None, str, dict[str, Any]]]) -> None:
        for worker, kind, data in out:
            with contextlib.suppress(Exception):  # a worker that just went away
                self.runner.send_message(kind, data, client_id=worker)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):
                now = time.monotonic()
                clients = {str(c.id): str(c.state) for c in self.runner.clients.all}
                out = []
                with self._lock:
                    for worker in list(self.ledger.held):
                        if clients.get(worker, "missing") == "missing":
                            out += self.ledger.lost(worker, now)
                    out += self.ledger.tick(now)
                self._send(out)

    def write(self) -> None:
        """The ledger's account in the run folder (temp file + rename), for the runner."""
        self._stop.set()
        with self._lock:
            account = self.ledger.account()
        with contextlib.suppress(OSError):
            tmp = self.run_dir / (MASTER_ACCOUNT + ".tmp")
            tmp.write_text(json.dumps(account, sort_keys=True))
            tmp.replace(self.run_dir / MASTER_ACCOUNT)
