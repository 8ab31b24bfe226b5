"""Is an attempt served? The same rule as ``loadgen.resilience.is_served``, with a fallback when it is absent."""

from __future__ import annotations

from loadgen.record import RequestRecord


def is_ok(record: RequestRecord) -> bool:
    """A complete 2xx with no error flag of any kind."""
    try:
        from loadgen.resilience import is_served
    except ImportError:  # pragma: no cover - helper module optional
        return (
            200 <= record.status < 300
            and record.complete
            and not record.in_band_error
            and not record.client_timeout
            and not record.transport_error
            and not record.cancelled
            and not record.not_sent
        )
    return is_served(record)
