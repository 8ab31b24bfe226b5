"""Cost guard: stop a tier, or the whole run, cleanly before it spends more than the scenario allows.

``BudgetGuard.try_acquire`` is called before each send. It counts the request and *reserves* the
expected tokens (and their cost), so concurrent in-flight requests cannot overshoot a limit;
``settle`` replaces the reservation by the real usage when the attempt ends. The first refusal is
sticky: once a scope (the run, or one tier) has refused, it refuses everything after, so the caller
stops that tier or the run once, writing ``EventRecord(name="budget_reached", detail=guard.detail(tier))``.

Limits: ``max_requests`` (every attempt counts, retries included), ``max_tokens`` (prompt + output)
and ``max_cost_usd`` (tokens x ``price_per_mtok_in``/``price_per_mtok_out``; a tier's own prices,
when given in ``per_tier``, override the run's). Nested ``per_tier`` inside a ``per_tier`` entry is
ignored.

Several Locust processes (``--processes N``, ``rushhour worker``): each process's guard is *leased*
(``leased=True``): its limits start at zero and grow by the grants of the master's ledger
(``loadgen/engine/ledger.py``, messages in ``loadgen/engine/lease.py``). ``reserve`` then answers a
``Shortfall`` (what is missing, per scope) instead of refusing, the worker asks the master, and the
master grants a lease or refuses for the run (the cap is reached everywhere at once). A lease that a
process does not use goes back to the master when it is reclaimed or when the process ends, so an
uneven load still reaches the whole cap. The equal-share mode (``workers=N, worker_index=i``, integer
limits split so the shares sum exactly to the limit) is kept for callers without a master.

Thread- and greenlet-safe: one lock, held only for arithmetic (no I/O, no yield).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from rushhour.scenarios.model import Budget

RUN = "run"
FIELDS = ("requests", "tokens", "cost_usd")  # what a lease carries, per scope


def scope_key(tier: str | None) -> str:
    """The name of a scope between processes: ``run`` or ``tier:<name>`` (a tier may be called "run")."""
    return RUN if tier is None else f"tier:{tier}"


@dataclass(slots=True)
class Shortfall:
    """What a leased guard lacks to reserve one request: per scope key, the missing amount and one
    request's size (the master sizes its grant from it)."""

    needs: dict[str, dict[str, float]]
    units: dict[str, dict[str, float]]


def _share_int(limit: int | None, workers: int, index: int) -> int | None:
    if limit is None:
        return None
    base, extra = divmod(limit, workers)
    return base + (1 if index < extra else 0)


def _share_float(limit: float | None, workers: int) -> float | None:
    return None if limit is None else limit / workers


@dataclass(slots=True)
class _Limits:
    max_requests: int | None
    max_tokens: int | None
    max_cost_usd: float | None


@dataclass(slots=True)
class _Usage:
    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    reserved_tokens: int = 0
    reserved_cost_usd: float = 0.0
    in_flight: int = 0
    refused: int = 0
    reached: str | None = None  # which limit stopped this scope

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(slots=True)
class _Price:
    per_mtok_in: float = 0.0
    per_mtok_out: float = 0.0

    def cost(self, prompt_tokens: int, output_tokens: int) -> float:
        return (prompt_tokens * self.per_mtok_in + output_tokens * self.per_mtok_out) / 1e6


@dataclass(slots=True)
class _Scope:
    name: str
    limits: _Limits
    usage: _Usage = field(default_factory=_Usage)

    def would_exceed(self, tokens: int, cost: float) -> str | None:
        lim, use = self.limits, self.usage
        if lim.max_requests is not None and use.requests + 1 > lim.max_requests:
            return "max_requests"
        if lim.max_tokens is not None and use.tokens + use.reserved_tokens + tokens > lim.max_tokens:
            return "max_tokens"
        if lim.max_cost_usd is not None and (
            use.cost_usd + use.reserved_cost_usd + cost > lim.max_cost_usd * (1 + 1e-12) + 1e-15
        ):
            return "max_cost_usd"
        return None

    def deficit(self, tokens: int, cost: float) -> dict[str, float]:
        """How much more of each limited field one more request of this size needs (0: it fits)."""
        lim, use = self.limits, self.usage
        out: dict[str, float] = {}
        if lim.max_requests is not None:
            out["requests"] = max(0, use.requests + 1 - lim.max_requests)
        if lim.max_tokens is not None:
            out["tokens"] = max(0, use.tokens + use.reserved_tokens + tokens - lim.max_tokens)
        if lim.max_cost_usd is not None:
            over = use.cost_usd + use.reserved_cost_usd + cost - lim.max_cost_usd
            # the same tolerance as would_exceed (sums of float prices), so a granted deficit fits
            out["cost_usd"] = over if over > lim.max_cost_usd * 1e-12 + 1e-15 else 0.0
        return out

    def spare(self) -> dict[str, float]:
        """Allowance not used or reserved (a leased scope gives it back)."""
        lim, use = self.limits, self.usage
        out: dict[str, float] = {}
        if lim.max_requests is not None:
            out["requests"] = max(0, lim.max_requests - use.requests)
        if lim.max_tokens is not None:
            out["tokens"] = max(0, lim.max_tokens - use.tokens - use.reserved_tokens)
        if lim.max_cost_usd is not None:
            out["cost_usd"] = max(0.0, lim.max_cost_usd - use.cost_usd - use.reserved_cost_usd)
        return out

    def add(self, amounts: dict[str, float], sign: int = 1) -> None:
        """Grow (or with ``sign=-1`` shrink) the allowance of the limited fields."""
        lim = self.limits
        if lim.max_requests is not None and "requests" in amounts:
            lim.max_requests += sign * int(amounts["requests"])
        if lim.max_tokens is not None and "tokens" in amounts:
            lim.max_tokens += sign * int(amounts["tokens"])
        if lim.max_cost_usd is not None and "cost_usd" in amounts:
            lim.max_cost_usd = max(0.0, lim.max_cost_usd + sign * float(amounts["cost_usd"]))

    @property
    def governed(self) -> bool:
        lim = self.limits
        return lim.max_requests is not None or lim.max_tokens is not None or lim.max_cost_usd is not None


def _field_limit(name: str) -> str:
    return {"requests": "max_requests", "tokens": "max_tokens", "cost_usd": "max_cost_usd"}.get(name, name)


class BudgetGuard:
    """Counts requests, tokens and dollars overall and per tier, and refuses sends past a limit."""

    def __init__(
        self, budget: Budget | None, *, workers: int = 1, worker_index: int = 0, leased: bool = False
    ) -> None:
        if workers < 1 or (not leased and not 0 <= worker_index < workers):
            raise ValueError("need workers >= 1 and 0 <= worker_index < workers")
        budget = budget or Budget()
        self.workers = workers
        self.worker_index = worker_index
        self.leased = leased
        self._lock = threading.Lock()
        self._whole: dict[str, _Limits] = {}  # the scenario's limits per scope (a leased guard's own start at 0)
        self._run = _Scope(RUN, self._limits(budget, RUN))
        self._price = _Price(budget.price_per_mtok_in or 0.0, budget.price_per_mtok_out or 0.0)
        self._tiers: dict[str, _Scope] = {}
        self._tier_prices: dict[str, _Price] = {}
        for tier, tier_budget in budget.per_tier.items():
            self._tiers[tier] = _Scope(tier, self._limits(tier_budget, scope_key(tier)))
            if tier_budget.price_per_mtok_in is not None or tier_budget.price_per_mtok_out is not None:
                self._tier_prices[tier] = _Price(
                    tier_budget.price_per_mtok_in
                    if tier_budget.price_per_mtok_in is not None
                    else self._price.per_mtok_in,
                    tier_budget.price_per_mtok_out
                    if tier_budget.price_per_mtok_out is not None
                    else self._price.per_mtok_out,
                )
        self._check_prices(budget)

    def _limits(self, budget: Budget, key: str) -> _Limits:
        self._whole[key] = _Limits(budget.max_requests, budget.max_tokens, budget.max_cost_usd)
        if self.leased:  # nothing until the master grants it
            return _Limits(
                None if budget.max_requests is None else 0,
                None if budget.max_tokens is None else 0,
                None if budget.max_cost_usd is None else 0.0,
            )
        return _Limits(
            _share_int(budget.max_requests, self.workers, self.worker_index),
            _share_int(budget.max_tokens, self.workers, self.worker_index),
            _share_float(budget.max_cost_usd, self.workers),
        )

    def whole_limits(self) -> dict[str, dict[str, float]]:
        """The scenario's limits per scope key, limited fields only (what the master's ledger enforces)."""
        out: dict[str, dict[str, float]] = {}
        for key, lim in self._whole.items():
            fields = {"requests": lim.max_requests, "tokens": lim.max_tokens, "cost_usd": lim.max_cost_usd}
            kept = {name: value for name, value in fields.items() if value is not None}
            if kept:
                out[key] = kept
        return out

    def _check_prices(self, budget: Budget) -> None:
        has_run_price = budget.price_per_mtok_in is not None or budget.price_per_mtok_out is not None
        if budget.max_cost_usd is not None and not has_run_price and not self._tier_prices:
            raise ValueError("budget.max_cost_usd needs price_per_mtok_in and/or price_per_mtok_out")
        for tier, scope in self._tiers.items():
            if scope.limits.max_cost_usd is not None and not has_run_price and tier not in self._tier_prices:
                raise ValueError(f"budget.per_tier.{tier}.max_cost_usd needs a price")

    def _tier(self, tier: str) -> _Scope:
        scope = self._tiers.get(tier)
        if scope is None:  # a tier without limits of its own is still counted
            scope = self._tiers[tier] = _Scope(tier, _Limits(None, None, None))
        return scope

    # ----------------------------------------------------------------- pricing

    def price(self, tier: str) -> tuple[float, float]:
        """USD per million (prompt, output) tokens for a tier."""
        p = self._tier_prices.get(tier, self._price)
        return p.per_mtok_in, p.per_mtok_out

    def cost(self, tier: str, prompt_tokens: int, output_tokens: int) -> float:
        return self._tier_prices.get(tier, self._price).cost(prompt_tokens, output_tokens)

    # ----------------------------------------------------------------- the protocol

    def try_acquire(self, tier: str, expected_prompt_tokens: int = 0, expected_output_tokens: int = 0) -> bool:
        """Reserve one request and its expected tokens; False (sticky) once a limit would be exceeded."""
        verdict = self.reserve(tier, expected_prompt_tokens, expected_output_tokens)
        return verdict is True

    def reserve(
        self, tier: str, expected_prompt_tokens: int = 0, expected_output_tokens: int = 0
    ) -> bool | Shortfall:
        """``try_acquire``, except that a leased guard short of allowance answers what it lacks (and
        refuses nothing yet: only the master decides that the run's cap is reached)."""
        tokens = max(0, expected_prompt_tokens) + max(0, expected_output_tokens)
        cost = self.cost(tier, max(0, expected_prompt_tokens), max(0, expected_output_tokens))
        with self._lock:
            scopes = [self._run, self._tier(tier)]
            for scope in scopes:
                if scope.usage.reached is not None:
                    scope.usage.refused += 1
                    return False
            if self.leased:
                short = {}
                for scope in scopes:
                    missing = scope.deficit(tokens, cost)
                    if any(value > 0 for value in missing.values()):
                        short[self._key(scope)] = missing
                if short:
                    units = {key: {"requests": 1, "tokens": tokens, "cost_usd": cost} for key in short}
                    return Shortfall(short, units)
            for scope in scopes:
                limit = scope.would_exceed(tokens, cost)
                if limit is not None:
                    scope.usage.reached = limit
                    scope.usage.refused += 1
                    return False
            for scope in scopes:
                use = scope.usage
                use.requests += 1
                use.reserved_tokens += tokens
                use.reserved_cost_usd += cost
                use.in_flight += 1
            return True

    # ----------------------------------------------------------------- leases (a leased guard only)

    def _key(self, scope: _Scope) -> str:
        return RUN if scope is self._run else scope_key(scope.name)

    def _by_key(self, key: str) -> _Scope | None:
        if key == RUN:
            return self._run
        return self._tier(key[len("tier:"):]) if key.startswith("tier:") else None

    def grant(self, key: str, amounts: dict[str, float]) -> None:
        """The master leased this much more of a scope to this process."""
        with self._lock:
            scope = self._by_key(key)
            if scope is not None:
                scope.add(amounts)

    def take_spare(self, keys: list[str] | None = None) -> dict[str, dict[str, float]]:
        """Give back what is neither used nor reserved (of ``keys``, or every scope): the allowance
        shrinks to the usage, and the amounts are returned for the master."""
        with self._lock:
            scopes = [(RUN, self._run)] + [(scope_key(name), s) for name, s in self._tiers.items()]
            out: dict[str, dict[str, float]] = {}
            for key, scope in scopes:
                if (keys is not None and key not in keys) or not scope.governed:
                    continue
                spare = scope.spare()
                if any(value > 0 for value in spare.values()):
                    scope.add(spare, -1)
                    out[key] = spare
            return out

    def mark_reached(self, key: str, limit: str) -> None:
        """The master says this scope's cap is reached for the run: refuse from now on (sticky)."""
        with self._lock:
            scope = self._by_key(key)
            if scope is not None and scope.usage.reached is None:
                scope.usage.reached = _field_limit(limit)

    def settle(
        self,
        tier: str,
        prompt_tokens: int,
        output_tokens: int,
        *,
        expected_prompt_tokens: int | None = None,
        expected_output_tokens: int | None = None,
    ) -> None:
        """Book the real usage of an acquired request and release its reservation.

        Pass the same ``expected_*`` values given to ``try_acquire`` to release exactly that
        reservation; without them the mean outstanding reservation of the tier is released.
        Pass 0 tokens for attempts the provider does not bill (rejections, OpenAI flex 429).
        """
        prompt_tokens, output_tokens = max(0, prompt_tokens), max(0, output_tokens)
        cost = self.cost(tier, prompt_tokens, output_tokens)
        with self._lock:
            scopes = [self._run, self._tier(tier)]
            tier_scope = scopes[-1]
            if expected_prompt_tokens is not None or expected_output_tokens is not None:
                ep, eo = max(0, expected_prompt_tokens or 0), max(0, expected_output_tokens or 0)
                release_tokens, release_cost = ep + eo, self.cost(tier, ep, eo)
            else:
                n = max(1, tier_scope.usage.in_flight)
                release_tokens = tier_scope.usage.reserved_tokens // n
                release_cost = tier_scope.usage.reserved_cost_usd / n
            for scope in scopes:
                use = scope.usage
                use.prompt_tokens += prompt_tokens
                use.output_tokens += output_tokens
                use.cost_usd += cost
                use.reserved_tokens = max(0, use.reserved_tokens - release_tokens)
                use.reserved_cost_usd = max(0.0, use.reserved_cost_usd - release_cost)
                use.in_flight = max(0, use.in_flight - 1)
                if use.in_flight == 0:
                    use.reserved_tokens, use.reserved_cost_usd = 0, 0.0

    def release(self, tier: str, expected_prompt_tokens: int = 0, expected_output_tokens: int = 0) -> None:
        """Undo a ``try_acquire`` whose request was never sent (e.g. the route's breaker was open):
        the request is no longer counted and its reservation is freed. A reached limit stays reached."""
        ep, eo = max(0, expected_prompt_tokens), max(0, expected_output_tokens)
        tokens, cost = ep + eo, self.cost(tier, ep, eo)
        with self._lock:
            for scope in (self._run, self._tier(tier)):
                use = scope.usage
                use.requests = max(0, use.requests - 1)
                use.reserved_tokens = max(0, use.reserved_tokens - tokens)
                use.reserved_cost_usd = max(0.0, use.reserved_cost_usd - cost)
                use.in_flight = max(0, use.in_flight - 1)
                if use.in_flight == 0:
                    use.reserved_tokens, use.reserved_cost_usd = 0, 0.0

    # ----------------------------------------------------------------- reporting

    def stop_scope(self, tier: str | None) -> str | None:
        """``"run"`` when the run's budget is reached, ``"tier"`` when only this tier's is, else None."""
        with self._lock:
            if self._run.usage.reached is not None:
                return "run"
            scope = self._tiers.get(tier) if tier is not None else None
            if scope is not None and scope.usage.reached is not None:
                return "tier"
            return None

    def detail(self, tier: str | None = None) -> dict[str, Any]:
        """What to put in ``EventRecord(name="budget_reached").detail``: scope, limit, usage."""
        with self._lock:
            scope = self._run
            if tier is not None and self._run.usage.reached is None and tier in self._tiers:
                scope = self._tiers[tier]
            return {
                "scope": RUN if scope is self._run else "tier",
                "tier": tier,
                "limit": scope.usage.reached,
                "limits": self._limits_of(scope),
                "used": self._usage_dict(scope.usage),
                "workers": self.workers,
                "worker_index": self.worker_index,
            }

    def _limits_of(self, scope: _Scope) -> dict[str, Any]:
        # a leased scope's own limits are only its lease: the run's limits are what a reader wants
        lim = self._whole.get(self._key(scope), scope.limits) if self.leased else scope.limits
        return {"max_requests": lim.max_requests, "max_tokens": lim.max_tokens, "max_cost_usd": lim.max_cost_usd}

    def snapshot(self) -> dict[str, Any]:
        """Usage of the run and of every tier seen so far (for run summaries)."""
        with self._lock:
            return {
                RUN: self._usage_dict(self._run.usage),
                "tiers": {name: self._usage_dict(s.usage) for name, s in self._tiers.items()},
            }

    @staticmethod
    def _usage_dict(use: _Usage) -> dict[str, Any]:
        return {
            "requests": use.requests,
            "prompt_tokens": use.prompt_tokens,
            "output_tokens": use.output_tokens,
            "tokens": use.tokens,
            "cost_usd": round(use.cost_usd, 6),
            "in_flight": use.in_flight,
            "refused": use.refused,
            "reached": use.reached,
        }
