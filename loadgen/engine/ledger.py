"""The master's budget ledger: leases of the run's budget to its workers, so one cap holds for all.

Pure bookkeeping (no I/O, no clock of its own): ``loadgen/engine/lease.py`` feeds it the workers'
messages and sends what it answers. Every method returns the messages to send as ``Out`` tuples.

A worker's guard spends only what the ledger has leased to it (``loadgen/budget.py``,
``leased=True``). The ledger keeps, per worker and scope (``run`` or ``tier:<name>``), the allowance
it has out there; what it can still lease is the scenario's limit minus all of them. So the sum of
what the workers can spend never passes the limit: the request cap is exact, tokens and dollars are
exact up to what in-flight answers use beyond their reservation (a prompt the server counts longer
than the client estimated; see docs/distributed.md).

When an ask does not fit, the ledger *reclaims*: every worker holding allowance in the short scopes
is asked to give back what it is not using (one round: it ends when every holder has answered or
gone missing, or after ``ROUND_TIMEOUT_S``), and the ask is served from that. If it still does not fit
after a whole round, the scope's cap is reached for the run: the ask is refused and every worker is told (sticky), so an
uneven load reaches the whole cap and then stops everywhere at once. A worker that ends gives back
everything it did not use; one that went missing keeps what it held (it may have spent it). An ask
of either still waiting then is dropped, not granted (nobody would use the grant).

A grant is reserved by the worker for the asking send as soon as it reads it (``lease.py``), so a
"reached" sent after it cannot strand it; and while other asks wait, a grant is no bigger than leaves
them what they need, so a pass that declares a cap reached leaves no granted unit spare (issue #15).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MSG_ASK = "rh_budget_ask"  # worker → master: {id, needs, units}
MSG_ANSWER = "rh_budget_answer"  # master → one worker: {id, granted: {scope: amounts}, reached: {scope: field}}
MSG_RECLAIM = "rh_budget_reclaim"  # master → holders: {round, scopes}
MSG_RETURN = "rh_budget_return"  # worker → master: {round, returned: {scope: amounts}, final}
MSG_REACHED = "rh_budget_reached"  # master → every worker: {scopes: {scope: field}}
LEASE_REQUESTS = 16  # far from the cap, a grant covers about this many requests of the asker's size
# A holder that does not answer a reclaim by then keeps what it holds, and the cap can be declared reached
# with that spare unused: the run stops short of it. So the round waits for every live holder: a loaded
# worker's message loop can stall for seconds (CI saw a 25-request cap end at 24 with a 2-s round), and a
# dead one is ended sooner by Locust's heartbeat (``lost``). Below the workers' ``ASK_TIMEOUT_S``.
ROUND_TIMEOUT_S = 15.0

Amounts = dict[str, float]
Out = tuple[str | None, str, dict[str, Any]]  # (worker id, or None for every worker; message; data)


@dataclass(slots=True)
class _Ask:
    worker: str
    ask_id: int
    needs: dict[str, Amounts]
    units: dict[str, Amounts]
    waited_round: int = 0  # the reclaim round it waited for (0: none yet)
    reclaimed: bool = False  # a whole reclaim round ran while it waited


@dataclass
class Counts:
    """What the ledger did (for ``budget-master.json`` and run.json ``budget_usage.master``)."""

    asks: int = 0
    grants: int = 0
    refused: int = 0
    reclaim_rounds: int = 0
    round_timeouts: int = 0  # rounds ended with a holder silent: the run may stop short of a cap
    lost: int = 0  # workers that went missing: what they held stays counted (the run may stop short)
    returns: int = 0
    reached: dict[str, str] = field(default_factory=dict)


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _clean(raw: Any) -> dict[str, Amounts]:
    """A worker's {scope: {field: amount}} with only numbers >= 0 kept (a message is not trusted)."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Amounts] = {}
    for key, amounts in raw.items():
        if isinstance(key, str) and isinstance(amounts, dict):
            out[key] = {str(f): max(0.0, _num(v)) for f, v in amounts.items()}
    return out


class Ledger:
    """The run's budget on the master: what each worker holds, what is left, who waits for what."""

    def __init__(self, limits: dict[str, Amounts], workers: int) -> None:
        self.limits = {key: dict(fields) for key, fields in limits.items() if fields}
        self.workers = max(1, workers)
        self.held: dict[str, dict[str, Amounts]] = {}  # worker → scope → allowance out there
        self.pending: list[_Ask] = []
        self.round = 0
        self.awaiting: set[str] = set()
        self.round_started: float | None = None
        self.gone: set[str] = set()  # ended (gave back) or missing (keeps what it held)
        self.counts = Counts()

    # ----------------------------------------------------------------- figures

    def available(self, key: str, name: str) -> float:
        limit = self.limits.get(key, {}).get(name)
        if limit is None:
            return float("inf")
        return limit - sum(held.get(key, {}).get(name, 0.0) for held in self.held.values())

    def account(self) -> dict[str, Any]:
        """The ledger at the end: limits, what each worker was left holding (= what it used once it
        gave the rest back), and what the ledger did."""
        c = self.counts
        return {
            "limits": self.limits,
            "held": {w: {k: {f: _round(v) for f, v in a.items()} for k, a in s.items()} for w, s in self.held.items()},
            "asks": c.asks, "grants": c.grants, "refused": c.refused, "reclaim_rounds": c.reclaim_rounds,
            "round_timeouts": c.round_timeouts, "lost": c.lost, "returns": c.returns, "reached": c.reached,
        }

    # ----------------------------------------------------------------- messages in

    def ask(self, worker: str, data: Any, now: float) -> list[Out]:
        """A worker lacks allowance for one request (``MSG_ASK``)."""
        data = data if isinstance(data, dict) else {}
        ask_id = data.get("id")
        if not isinstance(ask_id, int):
            return []
        self.counts.asks += 1
        needs = {k: v for k, v in _clean(data.get("needs")).items() if k in self.limits}
        self.pending.append(_Ask(worker, ask_id, needs, _clean(data.get("units"))))
        return self._serve(now)

    def give_back(self, worker: str, data: Any, now: float) -> list[Out]:
        """A worker returns allowance it does not use (``MSG_RETURN``: a reclaim's answer, or its end)."""
        data = data if isinstance(data, dict) else {}
        self.counts.returns += 1
        held = self.held.setdefault(worker, {})
        for key, amounts in _clean(data.get("returned")).items():
            mine = held.setdefault(key, {})
            for name, value in amounts.items():
                mine[name] = max(0.0, mine.get(name, 0.0) - value)
        if data.get("final"):
            self.gone.add(worker)
            self._drop_asks(worker)
        if data.get("round") == self.round or data.get("final"):
            self.awaiting.discard(worker)
        return self._after_return(now)

    def lost(self, worker: str, now: float) -> list[Out]:
        """A worker went missing: what it held stays counted (it may have spent it); nobody waits for it."""
        if worker in self.gone:
            return []
        self.gone.add(worker)
        self._drop_asks(worker)
        self.counts.lost += 1
        self.awaiting.discard(worker)
        return self._after_return(now)

    def _drop_asks(self, worker: str) -> None:
        """A worker ended or went missing: an ask of its still waiting is not granted (nobody would use it,
        and the ledger would count it as held there: the run would stop short of the cap)."""
        self.pending = [ask for ask in self.pending if ask.worker != worker]

    def tick(self, now: float) -> list[Out]:
        """Called a few times a second: a reclaim round nobody finished ends after ``ROUND_TIMEOUT_S``."""
        if self.round_started is not None and now - self.round_started >= ROUND_TIMEOUT_S:
            self.counts.round_timeouts += 1
            self.awaiting.clear()
            return self._after_return(now)
        return []

    # ----------------------------------------------------------------- decisions

    def _after_return(self, now: float) -> list[Out]:
        if self.round_started is not None and not self.awaiting:
            self.round_started = None
            for ask in self.pending:
                if ask.waited_round == self.round:
                    ask.reclaimed = True
        return self._serve(now)

    def _short(self, ask: _Ask) -> dict[str, str]:
        """The scopes (and fields) an ask does not fit in, of what is left to lease."""
        out: dict[str, str] = {}
        for key, needs in ask.needs.items():
            for name, need in needs.items():
                if need > 0 and self.available(key, name) < need - _slack(name, need):
                    out[key] = name
                    break
        return out

    def _serve(self, now: float) -> list[Out]:
        out: list[Out] = []
        waiting: list[_Ask] = []
        newly_reached: dict[str, str] = {}
        for i, ask in enumerate(self.pending):
            done = {k: self.counts.reached[k] for k in ask.needs if k in self.counts.reached}
            if done:
                self.counts.refused += 1
                out.append((ask.worker, MSG_ANSWER, {"id": ask.ask_id, "granted": {}, "reached": done}))
                continue
            short = self._short(ask)
            if not short:
                others = _needs(waiting + self.pending[i + 1:])
                out.append((ask.worker, MSG_ANSWER, {"id": ask.ask_id, "granted": self._grant(ask, others),
                                                      "reached": {}}))
                continue
            if ask.reclaimed:  # a whole round gave back what was spare, and it still does not fit
                self.counts.refused += 1
                self.counts.reached.update(short)
                newly_reached.update(short)
                out.append((ask.worker, MSG_ANSWER, {"id": ask.ask_id, "granted": {}, "reached": short}))
                continue
            waiting.append(ask)
        self.pending = waiting
        if newly_reached:
            out.append((None, MSG_REACHED, {"scopes": newly_reached}))
            # asks behind the refused one on the same scope are refused by the next pass
            if any(k in newly_reached for ask in self.pending for k in ask.needs):
                return out + self._serve(now)
        if self.pending and self.round_started is None:
            out += self._reclaim(now)
        return out

    def _reclaim(self, now: float) -> list[Out]:
        keys = {k for ask in self.pending for k in self._short(ask)}
        holders = sorted(
            w for w, held in self.held.items()
            if w not in self.gone and any(v > 0 for k in keys for v in held.get(k, {}).values())
        )
        self.round += 1
        self.counts.reclaim_rounds += 1
        for ask in self.pending:
            ask.waited_round = self.round
        if not holders:  # nobody holds anything to give back: the round is over at once
            for ask in self.pending:
                ask.reclaimed = True
            return self._serve(now)
        self.awaiting, self.round_started = set(holders), now
        return [(w, MSG_RECLAIM, {"round": self.round, "scopes": sorted(keys)}) for w in holders]

    def _grant(self, ask: _Ask, others: dict[str, Amounts]) -> dict[str, Amounts]:
        """A lease for every scope the ask names: at least what it lacks, about ``LEASE_REQUESTS``
        requests of its size when plenty is left, never more than a share of what is left, nor more
        than leaves the other waiting asks (``others``: their needs summed) what they lack."""
        self.counts.grants += 1
        live = max(self.workers, len([w for w in self.held if w not in self.gone]))
        held = self.held.setdefault(ask.worker, {})
        granted: dict[str, Amounts] = {}
        for key, needs in ask.needs.items():
            unit = ask.units.get(key, {})
            lease: Amounts = {}
            for name in self.limits.get(key, {}):
                left = self.available(key, name)
                need = needs.get(name, 0.0)
                spare = left - others.get(key, {}).get(name, 0.0)
                want = max(need, min(unit.get(name, 0.0) * LEASE_REQUESTS, left / (2 * live), spare))
                amount = min(left, want)
                if name != "cost_usd":
                    amount = float(int(amount)) if amount >= need else float(-(-need // 1))
                if amount > 0:
                    lease[name] = amount
            mine = held.setdefault(key, {})
            for name, amount in lease.items():
                mine[name] = mine.get(name, 0.0) + amount
            granted[key] = lease
        return granted


def _needs(asks: list[_Ask]) -> dict[str, Amounts]:
    """What the asks lack, summed per scope and field."""
    out: dict[str, Amounts] = {}
    for ask in asks:
        for key, needs in ask.needs.items():
            mine = out.setdefault(key, {})
            for name, need in needs.items():
                mine[name] = mine.get(name, 0.0) + need
    return out


def _slack(name: str, need: float) -> float:
    return need * 1e-12 + 1e-15 if name == "cost_usd" else 0.0


def _round(value: float) -> float:
    return round(value, 9) if value != int(value) else int(value)
