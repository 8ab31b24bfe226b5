"""The socket side of the wire client: keep-alive connections on gevent sockets, one attempt timed.

Runs inside Locust processes only (imports gevent). Every byte is timestamped the moment ``recv``
returns it, and the HTTP parser and SSE interpreter run on those bytes with that time, so no
buffering layer sits between the socket and the TTFT measurement.
"""

from __future__ import annotations

import contextlib
import errno
import time
from dataclasses import dataclass
from typing import Any

import gevent
import httptools
from gevent import socket as gsocket

from loadgen.record import RequestRecord, short_text
from loadgen.wire.http import MAX_ERROR_BODY, Endpoint, ResponseHead, ResponseParser, parse_retry_after
from loadgen.wire.stream import StreamInterpreter, error_summary, interpret_body
from stacks import header_reason

RECV_BYTES = 65536
COMPLETE_GRACE_NS = 1_000_000_000  # after the end marker, wait at most this long for the HTTP end


class Cancelled(gevent.GreenletExit):
    """Raised into a request's greenlet at the run's hard stop: the attempt is recorded cancelled."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The client's own deadlines for one attempt (seconds)."""

    connect_s: float = 5.0
    ttft_s: float = 120.0
    total_s: float = 600.0


class ConnectionPool:
    """Idle keep-alive connections to one endpoint, owned by one user (no locking: one greenlet loop)."""

    def __init__(self, endpoint: Endpoint, max_idle: int = 8) -> None:
        self.endpoint = endpoint
        self.max_idle = max_idle
        self._idle: list[gsocket.socket] = []
        self._ssl_context: Any = None
        self.opened = 0

    def acquire(self, connect_s: float) -> tuple[gsocket.socket, bool]:
        """An idle connection (reused=True) or a new one."""
        if self._idle:
            return self._idle.pop(), True
        return self._connect(connect_s), False

    def _connect(self, connect_s: float) -> gsocket.socket:
        sock = gsocket.create_connection((self.endpoint.host, self.endpoint.port), timeout=connect_s)
        sock.setsockopt(gsocket.IPPROTO_TCP, gsocket.TCP_NODELAY, 1)
        if self.endpoint.scheme == "https":
            from gevent import ssl as gssl

            if self._ssl_context is None:
                self._ssl_context = gssl.create_default_context()
            sock = self._ssl_context.wrap_socket(sock, server_hostname=self.endpoint.host)
        self.opened += 1
        return sock

    def release(self, sock: gsocket.socket) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(sock)
        else:
            _close(sock)

    def close(self) -> None:
        while self._idle:
            _close(self._idle.pop())


def _close(sock: gsocket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


class _Attempt:
    """Callbacks from the HTTP parser for one attempt; fills the record as bytes arrive."""

    __slots__ = (
        "_record_token_times",
        "body",
        "dialect",
        "head",
        "headers_ns",
        "interp",
        "parser",
        "stream_wanted",
    )

    def __init__(self, dialect: str, stream_wanted: bool, record_token_times: bool) -> None:
        self.dialect = dialect
        self.stream_wanted = stream_wanted
        self.head: ResponseHead | None = None
        self.headers_ns: int | None = None
        self.interp: StreamInterpreter | None = None
        self.body = bytearray()
        self._record_token_times = record_token_times
        self.parser: ResponseParser | None = None  # when set, stream bytes go straight to the interpreter

    def on_headers(self, head: ResponseHead, now_ns: int) -> None:
        self.head = head
        self.headers_ns = now_ns
        ctype = head.content_type
        if 200 <= head.status < 300 and self.stream_wanted and ctype != "application/json":
            interp = self.interp = StreamInterpreter(self.dialect, self._record_token_times)
            interp.head = self.body  # it keeps the body's start (HEAD_BYTES) in our buffer
            if self.parser is not None:
                self.parser.body_cb = interp.feed  # one call layer less per chunk

    def on_body(self, chunk: bytes, now_ns: int) -> None:
        if self.interp is not None:
            self.interp.feed(chunk, now_ns)  # keeps the start: names an HTML page or garbage
        elif len(self.body) < MAX_ERROR_BODY:
            self.body += chunk[: MAX_ERROR_BODY - len(self.body)]


class _Deadline(Exception):
    """The attempt's own timer (TTFT, total, or the grace after the end marker) expired."""


def _deadline_ns(attempt: _Attempt, ttft_deadline: int, total_deadline: int, now: int) -> int:
    interp = attempt.interp
    waiting_first = (interp is None and attempt.head is None) or (interp is not None and interp.first_token_ns is None)
    deadline = min(ttft_deadline, total_deadline) if waiting_first else total_deadline
    if interp is not None and interp.complete:
        deadline = min(deadline, (interp.last_token_ns or now) + COMPLETE_GRACE_NS)
    return deadline


def _phase(attempt: _Attempt) -> int:
    """Which deadline applies: 0 first token, 1 streaming, 2 / 3 after the end marker (with / without tokens)."""
    interp = attempt.interp
    if interp is None:
        return 0 if attempt.head is None else 1
    if interp.complete:
        return 2 if interp.first_token_ns is not None else 3
    return 0 if interp.first_token_ns is None else 1


def perform(
    pool: ConnectionPool,
    request: bytes,
    record: RequestRecord,
    *,
    anchor_ns: int,
    dialect: str,
    stream: bool,
    timeouts: Timeouts,
    record_token_times: bool = False,
) -> None:
    """Send one attempt and fill ``record`` with what happened; raises ``Cancelled`` after filling it."""
    attempt = _Attempt(dialect, stream, record_token_times)
    parser = ResponseParser(attempt.on_headers, attempt.on_body)
    attempt.parser = parser
    sock: gsocket.socket | None = None
    keep = False
    start = time.monotonic_ns()
    record.sent_ns = start - anchor_ns
    ttft_deadline = start + int(timeouts.ttft_s * 1e9)
    total_deadline = start + int(timeouts.total_s * 1e9)
    end_ns: int | None = None
    cancelled: Cancelled | None = None
    timer: gevent.Timeout | None = None
    try:
        for try_no in (0, 1):
            sock, reused = pool.acquire(timeouts.connect_s)
            try:
                sock.sendall(request)
                break
            except OSError:
                _close(sock)
                sock = None
                if not reused or try_no == 1:
                    raise  # a fresh connection that fails to send is a real transport error
        assert sock is not None
        # Deadlines: one timer per phase (first token, streaming, after the end marker), re-armed
        # only when the phase changes, and no timeout on the socket, so waiting for bytes allocates
        # no timer. A plain socket is read by waiting for readability, then one recv on the real
        # socket (gevent's recv tries first, and that fails with EAGAIN, an exception, on nearly
        # every streamed token); TLS sockets go through gevent's recv.
        sock.settimeout(None)
        plain = type(sock) is gsocket.socket
        raw_recv = sock._sock.recv if plain else sock.recv
        read_event = sock._read_event if plain else None
        wait = sock._wait
        phase_now = -1
        eof = False
        ready = False  # the last read filled the buffer: more is probably waiting
        while not parser.done:
            if _phase(attempt) != phase_now:
                phase_now = _phase(attempt)
                now = time.monotonic_ns()
                remaining = _deadline_ns(attempt, ttft_deadline, total_deadline, now) - now
                if remaining <= 0:
                    raise TimeoutError
                if timer is not None:
                    timer.close()
                timer = gevent.Timeout(remaining / 1e9, _Deadline)
                timer.start()
            if plain:
                if not ready:
                    wait(read_event)
                try:
                    data = raw_recv(RECV_BYTES)
                except BlockingIOError:
                    ready = False
                    continue
                ready = len(data) == RECV_BYTES
            else:
                data = raw_recv(RECV_BYTES)
            now = time.monotonic_ns()
            if not data:
                eof = True
                parser.feed_eof()
                end_ns = now
                break
            parser.feed(data, now)
            if parser.done:
                end_ns = now
        keep = parser.done and not eof and attempt.head is not None and attempt.head.keep_alive
        if not parser.done:
            if attempt.head is None:
                record.transport_error = True
                record.error = "connection closed before a response"
            elif attempt.interp is None or not attempt.interp.complete:
                record.error = "connection closed before the end of the response"
    except Cancelled as exc:
        cancelled = exc
        record.cancelled = True
    except (TimeoutError, gsocket.timeout, gevent.Timeout, _Deadline):
        if attempt.interp is not None and attempt.interp.complete:
            pass  # the end marker came; only the HTTP framing never finished
        else:
            record.client_timeout = True
            phase = (
                "first token"
                if attempt.head is None or (attempt.interp is not None and attempt.interp.first_token_ns is None)
                else "response"
            )
            record.error = f"client timeout waiting for the {phase}"
    except httptools.HttpParserError as exc:
        record.transport_error = True
        record.error = short_text(f"malformed HTTP response: {exc}")
    except OSError as exc:
        record.transport_error = True
        name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        record.error = short_text(f"{name}: {exc.strerror or exc}")
    finally:
        parser.close()
        attempt.parser = None
        if timer is not None:
            timer.close()
        if end_ns is None:
            end_ns = time.monotonic_ns()
        if sock is not None:
            if keep:
                pool.release(sock)
            else:
                _close(sock)
    _fill(record, attempt, anchor_ns, end_ns)
    if cancelled is not None:
        raise cancelled


def _fill(record: RequestRecord, attempt: _Attempt, anchor_ns: int, end_ns: int) -> None:
    record.done_ns = end_ns - anchor_ns
    head = attempt.head
    if head is None:
        return
    record.status = head.status
    record.headers_ns = (attempt.headers_ns or end_ns) - anchor_ns
    headers = head.headers
    record.retry_after_s = parse_retry_after(headers)
    reason = _header_reason(headers, head.status)
    interp = attempt.interp
    if interp is not None:
        _fill_stream(record, interp, anchor_ns, bytes(attempt.body))
    elif 200 <= head.status < 300:
        facts = interpret_body(attempt.dialect, bytes(attempt.body))
        if facts.get("has_output"):
            record.complete = record.error is None
            record.first_token_ns = record.last_token_ns = record.done_ns
            record.tokens = 1
        record.prompt_tokens = facts.get("prompt_tokens")
        record.output_tokens = facts.get("output_tokens")
        record.cached_tokens = facts.get("cached_tokens")
        record.service_tier = facts.get("service_tier")
        if facts.get("error"):
            record.error = record.error or facts["error"]
            reason = reason or facts.get("reason")
    else:
        body = bytes(attempt.body)
        text_reason, text = _error_body(body)
        reason = reason or text_reason
        record.error = record.error or text
    record.reason = reason or record.reason


def _header_reason(headers: dict[str, str], status: int = 0) -> str | None:
    """The drop facts a stack puts in headers (they win over body texts): each stack profile names its
    own (stacks/<name>.py), e.g. llm-d's ``x-llm-d-request-dropped-reason``, SMG's ``X-SMG-Error-Code``
    and ``X-SMG-Preempted``, LiteLLM's exhausted ``x-ratelimit-*`` on a 429."""
    return header_reason(headers, status)


def _fill_stream(record: RequestRecord, interp: StreamInterpreter, anchor_ns: int, head_bytes: bytes) -> None:
    record.tokens = interp.tokens
    if interp.first_token_ns is not None:
        record.first_token_ns = interp.first_token_ns - anchor_ns
    if interp.last_token_ns is not None:
        record.last_token_ns = interp.last_token_ns - anchor_ns
    record.itl_max_ns = interp.itl_max_ns
    record.itl_mean_ns = interp.itl_mean_ns
    if interp.token_ns is not None:
        record.token_ns = [t - anchor_ns for t in interp.token_ns]
    record.complete = interp.complete
    record.in_band_error = interp.in_band_error
    record.reason = interp.reason
    record.prompt_tokens = interp.prompt_tokens
    record.output_tokens = interp.output_tokens
    record.cached_tokens = interp.cached_tokens
    record.service_tier = interp.service_tier
    if interp.events == 0 and head_bytes:
        record.error = record.error or short_text(b"not an event stream: " + head_bytes[:200])
    elif interp.malformed_text is not None:
        record.error = record.error or interp.malformed_text
    elif interp.malformed:
        record.error = record.error or f"malformed SSE: {interp.malformed} line(s) not understood"


def _error_body(body: bytes) -> tuple[str | None, str | None]:
    """(reason, short text) from an error response body: JSON error objects, else the raw text."""
    stripped = body.strip()
    if stripped[:1] == b"{":
        try:
            import orjson

            return error_summary(orjson.loads(stripped))
        except ValueError:
            pass
    return None, short_text(stripped) if stripped else None
