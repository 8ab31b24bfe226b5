"""Retry and fallback decisions for one logical request: pure functions, no I/O, no clock of their own.

The attempt loop (``loadgen`` users) sends an attempt, fills a ``RequestRecord`` and asks
``next_step`` what to do next. The answer depends only on the policy, the record's raw facts, the
attempt number, the elapsed time and the caller's seeded ``random.Random``, so a seeded run makes the
same decisions again and every decision can be unit-tested without a network.

Outcome keys (``outcome_key``) are the words a ``RetryPolicy.on`` list uses:

- an HTTP status as a string (``"429"``, ``"503"``, ``"529"``, ``"408"``, ``"500"``, …);
- ``"timeout"``: the client's own deadline passed (``client_timeout``), whatever the status;
- ``"transport"``: no HTTP response (``transport_error`` or ``status == 0``);
- ``"in_band"``: an error event inside a 2xx stream (SGLang 503 in-band, Anthropic ``event: error``);
- ``"incomplete"``: a 2xx that ended without its end marker and without any other error flag;
- ``"breaker_open"``: the route's circuit breaker refused the attempt (never retried on that route);
- ``"not_sent"`` / ``"cancelled"``: the generator's own doing (never retried, never fallen back).

Retry-After: ``parse_retry_after`` returns the server's raw value, however large; ``next_step`` caps
the wait at ``max_backoff_s`` and at the time left in ``max_total_s`` (so a hostile
``retry-after: 999999`` cannot stall a user). ``honour_retry_after`` only matters with
``backoff: retry_after``; ``fixed`` and ``exponential`` ignore the header.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from rushhour.loadgen.workload import is_served as is_served
from rushhour.records.record import RequestRecord
from rushhour.scenarios.model import RetryPolicy

Action = Literal["retry", "fallback", "give_up", "done"]

# Outcome keys that say nothing about the target: never retried, never a reason to fall back.
_GENERATOR_SIDE = frozenset({"not_sent", "cancelled", "abandoned"})  # the client ended it: no word on the route


# --------------------------------------------------------------------------- Retry-After


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup on any mapping (dicts, multidicts, http.client messages)."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, val in headers.items():
        if key.lower() == name:
            return val
    return None


def _finite_non_negative(text: str) -> float | None:
    try:
        value = float(text.strip())
    except (ValueError, AttributeError):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def parse_retry_after(headers: Mapping[str, str], now_wall: float) -> float | None:
    """Seconds the server asks us to wait, or None when it asked nothing usable.

    Order: ``retry-after-ms`` (OpenAI; milliseconds), then ``retry-after`` as seconds (int or float)
    or an HTTP date (RFC 7231 IMF-fixdate, also RFC 850/asctime via ``email.utils``), measured from
    ``now_wall`` (``time.time()``). ``0`` gives 0.0; a date in the past gives 0.0; negative, NaN,
    infinite or unparseable values give None. Large values are returned as they are: the retry
    policy caps them (``max_backoff_s``, ``max_total_s``).
    """
    ms = _header(headers, "retry-after-ms")
    if ms is not None:
        value = _finite_non_negative(ms)
        if value is not None:
            return value / 1000.0
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    value = _finite_non_negative(raw)
    if value is not None:
        return value
    text = raw.strip()
    if not text or text.lstrip("+-").replace(".", "", 1).isdigit():
        return None  # a negative number, not a date
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # pragma: no cover - older Pythons returned None instead of raising
        return None
    if when.tzinfo is None:  # RFC 7231 dates are GMT; "-0000" parses as naive
        when = when.replace(tzinfo=dt.UTC)
    delta = when.timestamp() - now_wall
    if not math.isfinite(delta):
        return None
    return max(0.0, delta)


# --------------------------------------------------------------------------- outcomes


def outcome_key(record: RequestRecord) -> str | None:
    """The retry trigger an attempt matches (see module doc), or None when it was served."""
    if record.not_sent:
        return "not_sent"
    if record.cancelled:
        return "cancelled"
    if record.abandoned:
        return "abandoned"
    if record.reason == "breaker_open" and record.status == 0:
        return "breaker_open"
    if record.client_timeout:
        return "timeout"
    if record.transport_error or record.status == 0:
        return "transport"
    if 200 <= record.status < 300:
        if record.in_band_error:
            return "in_band"
        if not record.complete:
            return "incomplete"
        return None
    return str(record.status)


def is_failure_key(key: str | None) -> bool:
    """Does this outcome say the route is unhealthy or overloaded? (fallback + breaker trigger)

    Timeouts, transport errors, in-band errors, cut streams, 408, 429, 529 and every 5xx are.
    Other 4xx (bad request, auth, not found) are the client's fault and are not.
    """
    if key is None or key in _GENERATOR_SIDE:
        return False
    if key in ("timeout", "transport", "in_band", "incomplete", "breaker_open"):
        return True
    if key.isdigit():
        status = int(key)
        return status in (408, 429) or status >= 500
    return False


def retry_reason(record: RequestRecord) -> str:
    """The text recorded as the next attempt's ``retry_reason``: outcome key, then the reason fact.

    e.g. ``"429 rejected-saturated"``, ``"529 overloaded_error"``, ``"timeout"``, ``"in_band"``.
    """
    key = outcome_key(record) or "served"
    if record.reason and record.reason != key:
        return f"{key} {record.reason}"
    return key


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Decision:
    """What the attempt loop does next.

    ``retry``: wait ``delay_s`` then send again on ``route``. ``fallback``: send now on ``route``
    (the next route index). ``give_up`` / ``done``: stop. ``reason`` becomes the next attempt's
    ``retry_reason``; ``detail`` says why a retry was not made (``max_attempts``, ``max_total_s``,
    ``not_in_policy``, ``not_a_failure``, ``no_route_left``, …) for logs and tests.
    """

    action: Action
    delay_s: float = 0.0
    route: int = 0
    reason: str = ""
    detail: str = ""


def backoff_delay(policy: RetryPolicy, attempt: int, retry_after_s: float | None, rng: random.Random) -> float:
    """Delay before retry number ``attempt`` (1 = the first retry), before the total-time cap.

    ``retry_after``: the server's value when present and honoured, else exponential;
    ``fixed``: ``base_s``; ``exponential``: full jitter ``uniform(0, min(max_backoff_s, base_s·2^(attempt-1)))``.
    Always capped at ``max_backoff_s``.
    """
    if (
        policy.backoff == "retry_after"
        and policy.honour_retry_after
        and retry_after_s is not None
        and math.isfinite(retry_after_s)
        and retry_after_s >= 0
    ):
        delay = retry_after_s
    elif policy.backoff == "fixed":
        delay = policy.base_s
    else:
        exponent = min(max(attempt - 1, 0), 60)  # 2^60 s is already longer than any cap
        ceiling = min(policy.max_backoff_s, policy.base_s * (2.0**exponent))
        delay = rng.uniform(0.0, ceiling)
    return max(0.0, min(delay, policy.max_backoff_s))


def next_step(
    policy: RetryPolicy,
    record: RequestRecord,
    attempt: int,
    elapsed_s: float,
    rng: random.Random,
    routes_left: int,
    *,
    route_index: int = 0,
) -> Decision:
    """Decide after an attempt: ``done``, ``retry`` (same route, after a delay), ``fallback`` or ``give_up``.

    ``attempt`` is the number of attempts made so far on the current route (1-based; it restarts at
    1 after a fallback). ``elapsed_s`` is the time since the logical request's first attempt was
    sent; ``max_total_s`` bounds retries (a retry is made only if time is left, and its delay is
    capped to that time). ``routes_left`` counts routes after the current one; ``route_index`` is
    the current route (0 = primary); a fallback goes to ``route_index + 1``. Fallback happens on
    any failure (``is_failure_key``) once retries are exhausted or not allowed, whatever the time.
    """
    key = outcome_key(record)
    if key is None:
        return Decision("done", route=route_index, reason="served")
    reason = retry_reason(record)
    if key in _GENERATOR_SIDE:
        return Decision("give_up", route=route_index, reason=reason, detail=key)

    remaining = policy.max_total_s - max(0.0, elapsed_s)
    if key == "breaker_open":
        detail = "breaker_open"
    elif key not in policy.on:
        detail = "not_in_policy"
    elif attempt >= policy.max_attempts:
        detail = "max_attempts"
    elif remaining <= 0:
        detail = "max_total_s"
    else:
        delay = backoff_delay(policy, attempt, record.retry_after_s, rng)
        return Decision("retry", delay_s=min(delay, remaining), route=route_index, reason=reason)

    if routes_left > 0 and is_failure_key(key):
        return Decision("fallback", route=route_index + 1, reason=reason, detail=detail)
    if routes_left <= 0 and is_failure_key(key):
        detail = f"{detail}; no_route_left"
    elif not is_failure_key(key):
        detail = f"{detail}; not_a_failure"
    return Decision("give_up", route=route_index, reason=reason, detail=detail)
