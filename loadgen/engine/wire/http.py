"""HTTP/1.1 request bytes and an httptools-based response parser (no sockets, no gevent)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httptools

from rushhour.loadgen.endpoint import Endpoint as Endpoint  # where to connect: shared with the parent (runner)

MAX_ERROR_BODY = 64 * 1024  # enough to read an error message (non-2xx); a hostile body is cut here
MAX_BODY = 32 * 1024 * 1024  # a complete 2xx non-streamed answer is read whole up to this, then refused
MAX_HEAD_BYTES = 64 * 1024  # status line + headers; a header block that never ends is refused here
HEAD_TOO_LARGE = "response header block over 64 KiB"
BODY_TOO_LARGE = "response body over 32 MiB"


class ResponseTooLarge(Exception):
    """A part of the response passed its cap; ``str(exc)`` is the record's ``error`` text."""


def build_request(endpoint: Endpoint, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """A complete POST request as bytes (keep-alive, JSON body)."""
    lines = [
        f"POST {endpoint.base_path}{path} HTTP/1.1",
        f"Host: {endpoint.host_header}",
        "Content-Type: application/json",
        "Accept: text/event-stream, application/json",
        f"Content-Length: {len(body)}",
        "Connection: keep-alive",
    ]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(slots=True)
class ResponseHead:
    """What the status line and headers said."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names; last value wins
    keep_alive: bool = True

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()


class ResponseParser:
    """Feeds raw bytes to httptools and calls back on headers, body pieces and the end of the message.

    Callbacks receive the arrival time the caller passed with the bytes, so a stream is timed at
    the instant its bytes came off the socket, not when a higher layer got round to them.
    """

    __slots__ = ("_head_bytes", "_parser", "body_cb", "done", "head", "headers_cb", "headers_complete", "now_ns")

    def __init__(
        self,
        headers_cb: Callable[[ResponseHead, int], None] | None = None,
        body_cb: Callable[[bytes, int], None] | None = None,
    ) -> None:
        self.head = ResponseHead()
        self.headers_cb = headers_cb
        self.body_cb = body_cb
        self.now_ns = 0
        self.headers_complete = False
        self.done = False
        self._head_bytes = 0
        self._parser: Any = httptools.HttpResponseParser(self)

    def feed(self, data: bytes, now_ns: int) -> None:
        """Parse bytes that arrived at ``now_ns``.

        Raises ``httptools.HttpParserError`` on garbage, and ``ResponseTooLarge`` when the status
        line and headers pass ``MAX_HEAD_BYTES`` without ending (httptools would buffer them all).
        """
        self.now_ns = now_ns
        if self.headers_complete:
            self._parser.feed_data(data)
            return
        self._head_bytes += len(data)
        self._parser.feed_data(data)
        if not self.headers_complete and self._head_bytes > MAX_HEAD_BYTES:
            raise ResponseTooLarge(HEAD_TOO_LARGE)

    @property
    def received_any(self) -> bool:
        """Whether any response byte has arrived (a dead keep-alive connection delivers none)."""
        return self._head_bytes > 0

    def feed_eof(self) -> None:
        """The peer closed: for a body without a length, that ends the message."""
        if self.headers_complete and not self.done:
            length = self.head.headers.get("content-length")
            chunked = "chunked" in self.head.headers.get("transfer-encoding", "").lower()
            if length is None and not chunked:
                self.done = True  # HTTP/1.0-style body delimited by close

    def close(self) -> None:
        """Drop the httptools parser and the callbacks: they form reference cycles with this object
        (and with the caller's), which would otherwise be left to the cyclic garbage collector,
        whose pauses show up as TTFT error at high concurrency."""
        self._parser = None
        self.headers_cb = self.body_cb = None

    # httptools protocol callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.head.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_complete = True
        self.head.status = self._parser.get_status_code()
        self.head.keep_alive = self._parser.should_keep_alive()
        if self.headers_cb is not None:
            self.headers_cb(self.head, self.now_ns)

    def on_body(self, body: bytes) -> None:
        if self.body_cb is not None:
            self.body_cb(body, self.now_ns)

    def on_message_complete(self) -> None:
        self.done = True


def parse_retry_after(headers: dict[str, str]) -> float | None:
    """Seconds to wait: the resilience helper's parser when present (it knows HTTP dates), else ours."""
    full_parser: Any = None
    with contextlib.suppress(ImportError):
        from rushhour.loadgen.resilience import parse_retry_after as full_parser
    if full_parser is not None:
        try:
            value = full_parser(headers, time.time())
            return None if value is None else float(value)
        except Exception:  # a broken helper must not fail the attempt
            pass
    return _simple_retry_after(headers)


def _simple_retry_after(headers: dict[str, str]) -> float | None:
    """``retry-after-ms`` or ``retry-after`` in seconds; HTTP dates and odd values give None."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw.strip()) * scale
        except ValueError:
            continue
        if value >= 0 and value != float("inf"):
            return value
    return None
