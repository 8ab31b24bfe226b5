"""W3C trace context per attempt: the logical request is the trace, the attempt its span (records/traceparent.py)."""

from __future__ import annotations

import re

from rushhour.records.traceparent import traceparent

W3C = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01")


def test_the_trace_is_the_logical_request_and_the_span_the_attempt() -> None:
    logical, first, retry = "9f" * 16, "a1b2c3d4e5f60718" + "0" * 16, "0011223344556677" + "f" * 16
    one, two = traceparent(logical, first), traceparent(logical, retry)
    assert one == f"00-{logical}-a1b2c3d4e5f60718-01" and W3C.fullmatch(one)
    assert two is not None and two.split("-")[1] == one.split("-")[1] and two.split("-")[2] != one.split("-")[2]
    assert traceparent(logical.upper(), first) == one  # always lower-case hex on the wire


def test_ids_that_make_no_valid_context_send_none() -> None:
    """Never a malformed header: a non-hex or short id, or the spec's invalid all-zero ids, send nothing."""
    for logical, request in (("abc", "a" * 32), ("g" * 32, "a" * 32), ("0" * 32, "a" * 32), ("a" * 32, "0" * 32),
                             ("a" * 32, "short")):
        assert traceparent(logical, request) is None, (logical, request)
