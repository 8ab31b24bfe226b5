"""One request bridge: what Locust's statistics and UI show for an attempt, whichever way the run was started."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rushhour.records.record import RequestRecord, short_text

if TYPE_CHECKING:  # importing locust patches the process for gevent: the bridge itself stays importable anywhere
    from locust.env import Environment


def locust_figure(record: RequestRecord) -> tuple[str, float, str | None]:
    """An attempt as Locust shows it: (name, response time in ms, failure text or None) (pure).

    A served streamed attempt shows its time to first token under ``<tier> TTFT`` (what a tiered stack's queue
    decides); an attempt that was not served shows the time until it ended under ``<tier>``, with why.
    """
    ok = 200 <= record.status < 300 and record.complete and not record.in_band_error
    end = record.first_token_ns if ok and record.first_token_ns else record.done_ns
    name = f"{record.tier} TTFT" if ok and record.first_token_ns else record.tier
    elapsed_ms = ((end or 0) - (record.sent_ns or 0)) / 1e6
    return name, elapsed_ms, None if ok else failure_text(record)


def failure_text(record: RequestRecord) -> str:
    """The one-line text Locust shows for an attempt that was not served (redacted and cut like a record's)."""
    if record.cancelled:
        return "cancelled (its user was stopped)"
    if record.client_timeout:
        return "client timeout"
    return short_text(f"{record.status} {record.reason or record.in_band_error or record.error or ''}", 120) or ""


def request_event(env: Environment, stopping: Callable[[], bool]) -> Callable[[RequestRecord], None]:
    """The attempt hook both entry points install: each sent attempt fires one Locust request event.

    An attempt cancelled once the test is stopping is the stop's doing, not the target's failure, so it fires
    nothing (a fine ``locust -t`` run exits 0); its shard still records it ``cancelled`` for the audit.
    """
    fire = env.events.request.fire

    def on_attempt(record: RequestRecord) -> None:
        if record.not_sent or (record.cancelled and stopping()):
            return
        name, elapsed_ms, failure = locust_figure(record)
        context: dict[str, Any] = {"tenant": record.tenant}
        fire(request_type=record.dialect or "POST", name=name, response_time=elapsed_ms,
             response_length=record.tokens, exception=None if failure is None else RuntimeError(failure),
             context=context)

    return on_attempt
