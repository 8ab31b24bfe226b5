"""Cost guard: stops exactly at each limit, per tier and overall, and is safe across threads."""

from __future__ import annotations

import threading

import pytest

from rushhour.loadgen.budget import BudgetGuard
from rushhour.scenarios.model import Budget


def test_stops_exactly_at_max_requests_and_stays_stopped() -> None:
    guard = BudgetGuard(Budget(max_requests=5))
    assert [guard.try_acquire("a") for _ in range(7)] == [True] * 5 + [False] * 2
    guard.settle("a", 10, 10)
    assert not guard.try_acquire("a")  # sticky, even after a settle
    assert guard.stop_scope("a") == "run"
    detail = guard.detail("a")
    assert detail["scope"] == "run" and detail["limit"] == "max_requests" and detail["used"]["requests"] == 5


def test_tokens_reserved_in_flight_then_settled() -> None:
    guard = BudgetGuard(Budget(max_tokens=1000))
    assert guard.try_acquire("a", 400, 100)  # reserves 500
    assert guard.try_acquire("a", 400, 100)  # reserves 1000: exactly at the limit
    assert not guard.try_acquire("a", 1, 0)  # would exceed: refused, and sticky
    assert guard.detail()["limit"] == "max_tokens"


def test_settle_replaces_reservation_with_actual_usage() -> None:
    guard = BudgetGuard(Budget(max_tokens=1000))
    assert guard.try_acquire("a", 400, 100)
    guard.settle("a", 100, 0, expected_prompt_tokens=400, expected_output_tokens=100)  # a cheap answer
    assert guard.try_acquire("a", 800, 100)  # 100 used + 900 reserved = 1000
    guard.settle("a", 800, 100)  # mean reservation released
    snap = guard.snapshot()
    assert snap["run"]["tokens"] == 1000 and snap["run"]["in_flight"] == 0
    assert not guard.try_acquire("a", 1, 0)


def test_per_tier_limit_stops_only_that_tier() -> None:
    guard = BudgetGuard(Budget(max_requests=100, per_tier={"batch": Budget(max_requests=2)}))
    assert guard.try_acquire("batch") and guard.try_acquire("batch")
    assert not guard.try_acquire("batch")
    assert guard.stop_scope("batch") == "tier" and guard.stop_scope("interactive") is None
    assert guard.try_acquire("interactive")
    assert guard.detail("batch")["scope"] == "tier"
    assert guard.snapshot()["tiers"]["interactive"]["requests"] == 1


def test_cost_limit_with_price_table_and_tier_override() -> None:
    budget = Budget(
        max_cost_usd=1.0,
        price_per_mtok_in=1.0,
        price_per_mtok_out=4.0,
        per_tier={"premium": Budget(price_per_mtok_in=10.0)},
    )
    guard = BudgetGuard(budget)
    assert guard.price("premium") == (10.0, 4.0) and guard.price("other") == (1.0, 4.0)
    assert guard.cost("other", 1_000_000, 0) == pytest.approx(1.0)
    assert guard.try_acquire("premium", 50_000, 0)  # $0.50
    guard.settle("premium", 50_000, 0, expected_prompt_tokens=50_000, expected_output_tokens=0)
    assert guard.try_acquire("other", 0, 125_000)  # $0.50: exactly $1.00 in total
    assert not guard.try_acquire("other", 1, 0)
    assert guard.detail()["limit"] == "max_cost_usd"


def test_cost_limit_without_price_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="price"):
        BudgetGuard(Budget(max_cost_usd=5.0))


def test_worker_shares_sum_to_the_limit() -> None:
    budget = Budget(max_requests=10, max_tokens=1001)
    granted = 0
    for i in range(3):
        guard = BudgetGuard(budget, workers=3, worker_index=i)
        while guard.try_acquire("a"):
            granted += 1
    assert granted == 10
    with pytest.raises(ValueError):
        BudgetGuard(budget, workers=2, worker_index=2)


def test_no_budget_never_refuses() -> None:
    guard = BudgetGuard(None)
    assert all(guard.try_acquire("a", 10**9, 10**9) for _ in range(1000))


def test_thread_safe_exact_limit() -> None:
    guard = BudgetGuard(Budget(max_requests=1000))
    wins: list[int] = []

    def worker() -> None:
        n = 0
        for _ in range(400):
            if guard.try_acquire("a", 1, 1):
                n += 1
                guard.settle("a", 1, 1)
        wins.append(n)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(wins) == 1000
    assert guard.snapshot()["run"]["tokens"] == 2000


def test_release_undoes_an_unsent_acquire() -> None:
    guard = BudgetGuard(Budget(max_requests=2, max_tokens=100))
    assert guard.try_acquire("a", 60, 0)
    guard.release("a", 60, 0)  # e.g. the breaker was open: nothing was sent
    assert guard.snapshot()["run"]["requests"] == 0
    assert guard.try_acquire("a", 60, 40) and guard.try_acquire("a", 0, 0)
    assert not guard.try_acquire("a")
