"""W3C Trace Context for each attempt (pure): the trace is the logical request, the span the attempt.

``traceparent: 00-<trace id>-<parent id>-01`` (https://www.w3.org/TR/trace-context/): the trace id is the logical
request's id (32 hex: every retry, fallback and re-ask of one request is one trace), the parent id the first 16
hex of the attempt's request id (its span). Both are in every record already, so a user finds an attempt in
their gateway's and servers' traces from its record, and nothing new is stored: the OTLP export (audit/otlp.py)
makes its span from the same ids. A tier that sets its own ``traceparent`` header keeps it.
"""

from __future__ import annotations

import re

HEADER = "traceparent"
_HEX = re.compile(r"[0-9a-f]+")


def trace_ids(logical_id: str, request_id: str) -> tuple[str, str] | None:
    """The attempt's (trace id, span id) as lower-case hex; None when the ids make no valid trace context."""
    trace, span = logical_id.lower(), request_id.lower()[:16]
    if len(trace) != 32 or len(span) != 16 or not _HEX.fullmatch(trace) or not _HEX.fullmatch(span):
        return None
    if trace == "0" * 32 or span == "0" * 16:  # all-zero ids are invalid in the spec
        return None
    return trace, span


def traceparent(logical_id: str, request_id: str) -> str | None:
    """The attempt's header value; None when the ids are not the hex a trace context needs (never a bad header)."""
    ids = trace_ids(logical_id, request_id)
    return None if ids is None else f"00-{ids[0]}-{ids[1]}-01"  # 01: sampled, so an instrumented server records it
