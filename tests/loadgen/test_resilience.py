"""Retry decisions: Retry-After parsing, outcome keys, backoff bounds, total-time cap, fallback order."""

from __future__ import annotations

import email.utils
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from rushhour.loadgen.resilience import (
    Decision,
    backoff_delay,
    is_failure_key,
    is_served,
    next_step,
    outcome_key,
    parse_retry_after,
    retry_reason,
)
from rushhour.records.record import RequestRecord
from rushhour.scenarios.model import RetryPolicy

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vendor"
TAXONOMY = {
    "served",
    "queue_full",
    "queue_timeout",
    "shed",
    "preempted",
    "rate_limited",
    "overloaded",
    "failed",
    "timeout",
    "transport",
}


def rec(**kw: Any) -> RequestRecord:
    base: dict[str, Any] = dict(run_id="r", seq=1, request_id="q", logical_id="l", tier="t", tenant="x", persona="chat")
    base.update(kw)
    return RequestRecord(**base)


def served() -> RequestRecord:
    return rec(status=200, complete=True)


# --------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "0"}, 0.0),
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": " 3 "}, 3.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "-0.5"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "1e9"}, 1e9),  # huge: returned raw, the policy caps it
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "0"}, 0.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # ms wins
        ({"retry-after-ms": "-5", "retry-after": "9"}, 9.0),  # bad ms falls back
        ({"retry-after-ms": "garbage"}, None),
        ({"RETRY-AFTER-MS": "1000"}, 1.0),
    ],
)
def test_parse_retry_after_values(headers: dict[str, str], expected: float | None) -> None:
    got = parse_retry_after(headers, NOW)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_parse_retry_after_http_dates() -> None:
    future = email.utils.formatdate(NOW + 30, usegmt=True)  # IMF-fixdate
    assert parse_retry_after({"retry-after": future}, NOW) == pytest.approx(30.0)
    past = email.utils.formatdate(NOW - 30, usegmt=True)
    assert parse_retry_after({"retry-after": past}, NOW) == 0.0
    # RFC 850 and asctime forms are accepted too (asctime has no zone: GMT)
    assert parse_retry_after({"retry-after": "Thursday, 01-Jan-26 00:01:00 GMT"}, NOW) == pytest.approx(60.0)
    assert parse_retry_after({"retry-after": "Thu Jan  1 00:00:10 2026"}, NOW) == pytest.approx(10.0)
    assert parse_retry_after({"retry-after": "Thu, 99 Foo 2026 00:00:00 GMT"}, NOW) is None


# --------------------------------------------------------------------------- outcome keys


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"status": 200, "complete": True}, None),
        ({"status": 429, "reason": "rejected-saturated"}, "429"),
        ({"status": 503}, "503"),
        ({"status": 529}, "529"),
        ({"status": 0, "transport_error": True}, "transport"),
        ({"status": 0}, "transport"),
        ({"status": 200, "client_timeout": True}, "timeout"),
        ({"status": 0, "client_timeout": True}, "timeout"),
        ({"status": 200, "in_band_error": "Request waiting timeout reached."}, "in_band"),
        ({"status": 200, "complete": True, "in_band_error": "x"}, "in_band"),
        ({"status": 200, "complete": False}, "incomplete"),
        ({"status": 0, "reason": "breaker_open"}, "breaker_open"),
        ({"not_sent": True}, "not_sent"),
        ({"status": 200, "cancelled": True}, "cancelled"),
    ],
)
def test_outcome_key(kw: dict[str, Any], key: str | None) -> None:
    record = rec(**kw)
    assert outcome_key(record) == key
    assert is_served(record) == (key is None)


def test_failure_keys() -> None:
    for key in ("timeout", "transport", "in_band", "incomplete", "408", "429", "500", "503", "529"):
        assert is_failure_key(key), key
    not_failures: tuple[str | None, ...] = (None, "400", "401", "404", "not_sent", "cancelled", "200")
    for other in not_failures:
        assert not is_failure_key(other), other


def test_retry_reason_text() -> None:
    assert retry_reason(rec(status=429, reason="rejected-saturated")) == "429 rejected-saturated"
    assert retry_reason(rec(status=529, reason="overloaded_error")) == "529 overloaded_error"
    assert retry_reason(rec(status=200, client_timeout=True)) == "timeout"
    assert retry_reason(rec(status=0, reason="breaker_open")) == "breaker_open"


# --------------------------------------------------------------------------- backoff


def test_exponential_full_jitter_bounds() -> None:
    policy = RetryPolicy(backoff="exponential", base_s=0.5, max_backoff_s=4.0, max_attempts=10)
    rng = random.Random(1)
    for attempt in range(1, 10):
        ceiling = min(4.0, 0.5 * 2 ** (attempt - 1))
        draws = [backoff_delay(policy, attempt, None, rng) for _ in range(300)]
        assert all(0.0 <= d <= ceiling for d in draws)
        assert max(draws) > ceiling * 0.8  # it does use the whole range
    assert backoff_delay(policy, 10_000, None, rng) <= 4.0  # no overflow at huge attempt numbers


def test_fixed_and_retry_after_backoff() -> None:
    rng = random.Random(2)
    fixed = RetryPolicy(backoff="fixed", base_s=0.7)
    assert backoff_delay(fixed, 3, 99.0, rng) == 0.7  # fixed ignores Retry-After
    ra = RetryPolicy(backoff="retry_after", base_s=0.5, max_backoff_s=30.0)
    assert backoff_delay(ra, 1, 2.0, rng) == 2.0
    assert backoff_delay(ra, 1, 0.0, rng) == 0.0
    assert backoff_delay(ra, 1, 1e9, rng) == 30.0  # huge Retry-After capped
    assert 0.0 <= backoff_delay(ra, 2, None, rng) <= 1.0  # no header: exponential
    not_honoured = RetryPolicy(backoff="retry_after", honour_retry_after=False, base_s=0.5)
    assert backoff_delay(not_honoured, 1, 20.0, rng) <= 0.5
    assert backoff_delay(ra, 1, math.nan, rng) <= 0.5


def test_seeded_decisions_reproduce() -> None:
    policy = RetryPolicy(backoff="exponential", max_attempts=5)
    r = rec(status=503)
    a = [next_step(policy, r, n, 0.0, random.Random(9), 0).delay_s for n in range(1, 5)]
    b = [next_step(policy, r, n, 0.0, random.Random(9), 0).delay_s for n in range(1, 5)]
    assert a == b


# --------------------------------------------------------------------------- next_step


def test_served_is_done() -> None:
    d = next_step(RetryPolicy(max_attempts=3), served(), 1, 0.0, random.Random(0), 2)
    assert d == Decision("done", route=0, reason="served")


def test_retry_honours_retry_after_and_reason() -> None:
    policy = RetryPolicy(max_attempts=3)
    r = rec(status=429, reason="rejected-saturated", retry_after_s=1.25)
    d = next_step(policy, r, 1, 0.3, random.Random(0), 0)
    assert d.action == "retry" and d.delay_s == 1.25 and d.reason == "429 rejected-saturated"


def test_attempts_exhausted_gives_up_or_falls_back() -> None:
    policy = RetryPolicy(max_attempts=2)
    r = rec(status=503)
    assert next_step(policy, r, 1, 0.0, random.Random(0), 0).action == "retry"
    d = next_step(policy, r, 2, 0.0, random.Random(0), 0)
    assert d.action == "give_up" and d.detail.startswith("max_attempts")
    d = next_step(policy, r, 2, 0.0, random.Random(0), 1, route_index=0)
    assert d == Decision("fallback", 0.0, 1, "503", "max_attempts")


def test_total_time_cap() -> None:
    policy = RetryPolicy(max_attempts=10, max_total_s=10.0, max_backoff_s=30.0)
    r = rec(status=429, retry_after_s=25.0)
    d = next_step(policy, r, 1, 7.5, random.Random(0), 0)
    assert d.action == "retry" and d.delay_s == pytest.approx(2.5)  # capped to the time left
    d = next_step(policy, r, 2, 10.0, random.Random(0), 0)
    assert d.action == "give_up" and "max_total_s" in d.detail
    d = next_step(policy, r, 2, 12.0, random.Random(0), 1)
    assert d.action == "fallback"  # a fallback does not wait, so the time cap does not block it


def test_trigger_not_in_policy() -> None:
    policy = RetryPolicy(max_attempts=5)  # on: 429, 503, 529
    d = next_step(policy, rec(status=200, client_timeout=True), 1, 0.0, random.Random(0), 0)
    assert d.action == "give_up" and d.reason == "timeout"
    d = next_step(policy, rec(status=200, client_timeout=True), 1, 0.0, random.Random(0), 1)
    assert d.action == "fallback"  # a timeout is a failure even when not retried
    timeouts = RetryPolicy(max_attempts=5, on=["timeout", "transport", "in_band"])
    for r in (
        rec(status=200, client_timeout=True),
        rec(status=0, transport_error=True),
        rec(status=200, in_band_error="503"),
    ):
        assert next_step(timeouts, r, 1, 0.0, random.Random(0), 0).action == "retry"


def test_client_errors_never_fall_back() -> None:
    policy = RetryPolicy(max_attempts=3)
    d = next_step(policy, rec(status=400), 1, 0.0, random.Random(0), 2)
    assert d.action == "give_up" and "not_a_failure" in d.detail
    for r in (rec(not_sent=True), rec(status=200, cancelled=True)):
        assert next_step(policy, r, 1, 0.0, random.Random(0), 2).action == "give_up"


def test_fallback_order_through_routes() -> None:
    """Primary -> fallback 1 -> fallback 2 -> give up, one attempt each (max_attempts=1)."""
    policy = RetryPolicy()
    route, left, visited = 0, 2, [0]
    while True:
        d = next_step(
            policy, rec(status=529, reason="overloaded_error"), 1, 0.0, random.Random(0), left, route_index=route
        )
        if d.action != "fallback":
            break
        assert d.route == route + 1 and d.reason == "529 overloaded_error"
        route, left = d.route, left - 1
        visited.append(route)
    assert visited == [0, 1, 2] and d.action == "give_up"


def test_breaker_open_moves_on_without_retry() -> None:
    policy = RetryPolicy(max_attempts=5, on=["429", "503", "transport"])
    r = rec(status=0, reason="breaker_open")
    d = next_step(policy, r, 1, 0.0, random.Random(0), 1, route_index=0)
    assert d.action == "fallback" and d.route == 1 and d.reason == "breaker_open"
    assert next_step(policy, r, 1, 0.0, random.Random(0), 0).action == "give_up"


# --------------------------------------------------------------------------- vendor fixtures


def _fixtures() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]


def test_vendor_fixtures_are_well_formed() -> None:
    cases = _fixtures()
    assert len(cases) >= 15
    profiles = {c["profile"] for c in cases}
    assert {"openai", "anthropic", "sglang", "llm-d", "gaie-v1", "vllm", "smg"} <= profiles
    for c in cases:
        assert set(c) >= {"profile", "case", "status", "headers", "body", "expected_class", "source"}, c
        assert c["expected_class"] in TAXONOMY, c["case"]
        assert all(k == k.lower() for k in c["headers"]), c["case"]
        if c.get("stream"):
            assert c["body"].endswith("\n\n") and "data: " in c["body"]
        elif c["headers"].get("content-type", "").startswith("application/json"):
            json.loads(c["body"])


def test_vendor_retry_after_headers() -> None:
    by_case = {c["case"]: c for c in _fixtures()}
    assert parse_retry_after(by_case["rate_limit_error"]["headers"], NOW) == 15.0
    assert parse_retry_after(by_case["rate_limit_exceeded"]["headers"], NOW) == 20.0
    assert parse_retry_after(by_case["preempted_before_first_byte"]["headers"], NOW) == 1.0
    assert parse_retry_after(by_case["queue_full_rejected_saturated"]["headers"], NOW) is None
