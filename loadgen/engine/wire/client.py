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

from rushhour.loadgen.engine.wire.cancel import Cancelled as Cancelled  # interpreted: see cancel.py
from rushhour.loadgen.engine.wire.http import (
    BODY_TOO_LARGE,
    MAX_BODY,
    MAX_ERROR_BODY,
    Endpoint,
    ResponseHead,
    ResponseParser,
    ResponseTooLarge,
    parse_retry_after,
)
from rushhour.loadgen.engine.wire.reactor import Stream, reactor, stamp_receives
from rushhour.loadgen.engine.wire.stream import StreamInterpreter, error_summary, interpret_body
from rushhour.loadgen.engine.wire.toolcalls import ToolCallCollector
from rushhour.loadgen.prompts import ToolCall
from rushhour.records.record import FIRST_TOKEN_RECV, RequestRecord, short_text
from rushhour.stacks import header_reason
from rushhour.stacks.timing import from_headers

RECV_BYTES = 65536
COMPLETE_GRACE_NS = 1_000_000_000  # after the end marker, wait at most this long for the HTTP end
# Fairness: at most this many back-to-back full reads (256 KiB on a plain socket) before the
# greenlet goes back to the hub. A server that floods at full speed keeps ``recv`` returning full
# buffers; without this bound one attempt would never yield, and no deadline, other user or stop
# signal would run in the process.
MAX_READS_PER_WAKE = 4
TLS_BYTES_PER_YIELD = MAX_READS_PER_WAKE * RECV_BYTES  # the same bound for TLS, counted in bytes
# Drop an idle keep-alive connection before the server is likely to: uvicorn (vLLM, LiteLLM, SGLang)
# closes idle connections after 5 s by default, and a request sent on one it has just closed dies
# with no answer. A ``Keep-Alive: timeout=N`` response header shortens this further.
KEEPALIVE_S = 4.0
_STALE_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED, errno.ENOTCONN})
# Plain sockets are read by the process's reactor (wire/reactor.py); TLS sockets, or every socket when
# this is False (the benchmark's "before" row), by their own greenlet.
USE_REACTOR = True


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The client's own deadlines for one attempt (seconds)."""

    connect_s: float = 5.0
    ttft_s: float = 120.0
    total_s: float = 600.0
    keepalive_s: float = KEEPALIVE_S  # idle pooled connections older than this are not reused


class ConnectionPool:
    """Idle keep-alive connections to one endpoint, owned by one user (no locking: one greenlet loop).

    An idle connection is kept at most ``keepalive_s`` (or the server's ``Keep-Alive: timeout=N``
    less a second, if shorter) and dropped unused after that: servers close idle connections, and
    a request written into one they have closed gets no answer.
    """

    def __init__(self, endpoint: Endpoint, max_idle: int = 8, keepalive_s: float = KEEPALIVE_S) -> None:
        self.endpoint = endpoint
        self.max_idle = max_idle
        self.keepalive_ns = int(keepalive_s * 1e9)
        self._idle: list[tuple[gsocket.socket, int]] = []  # (socket, drop after), oldest first
        self._ssl_context: Any = None
        self.opened = 0
        self.expired = 0  # idle connections dropped for age

    def acquire(self, connect_s: float) -> tuple[gsocket.socket, bool]:
        """An idle connection (reused=True) or a new one."""
        idle = self._idle
        if idle:
            now = time.monotonic_ns()
            while idle:
                sock, drop_after = idle.pop()
                if now < drop_after:
                    return sock, True
                _close(sock)  # every older one is past its age too
                self.expired += 1
                while idle:
                    _close(idle.pop()[0])
                    self.expired += 1
        return self._connect(connect_s), False

    def _connect(self, connect_s: float) -> gsocket.socket:
        sock = gsocket.create_connection((self.endpoint.host, self.endpoint.port), timeout=connect_s)
        sock.setsockopt(gsocket.IPPROTO_TCP, gsocket.TCP_NODELAY, 1)
        if self.endpoint.scheme == "https":
            if self._ssl_context is None:
                self._ssl_context = client_tls_context()
            sock = self._ssl_context.wrap_socket(sock, server_hostname=self.endpoint.host)
        self.opened += 1
        return sock

    def release(self, sock: gsocket.socket, server_keepalive_s: float | None = None) -> None:
        """Keep ``sock`` for reuse; ``server_keepalive_s`` is what the server said it keeps it for."""
        keep_ns = self.keepalive_ns
        if server_keepalive_s is not None:
            keep_ns = min(keep_ns, int((server_keepalive_s - 1.0) * 1e9))
        if keep_ns > 0 and len(self._idle) < self.max_idle:
            self._idle.append((sock, time.monotonic_ns() + keep_ns))
        else:
            _close(sock)

    def close(self) -> None:
        while self._idle:
            _close(self._idle.pop()[0])


def client_tls_context(cafile: str | None = None) -> Any:
    """A verifying TLS client context whose sockets are gevent's, monkey-patched process or not.

    (``gevent.ssl.create_default_context`` is the standard library's: outside a patched process
    it makes standard sockets, whose reads block the whole hub.)
    """
    from gevent import ssl as gssl

    context = gssl.SSLContext(gssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names
    if cafile is None:
        context.load_default_certs()
    else:
        context.load_verify_locations(cafile)
    return context


def server_keepalive_s(headers: dict[str, str]) -> float | None:
    """``Keep-Alive: timeout=N`` in seconds, else None (most servers do not send it)."""
    raw = headers.get("keep-alive")
    if not raw:
        return None
    for part in raw.split(","):
        name, _, value = part.strip().partition("=")
        if name.strip().lower() == "timeout":
            try:
                seconds = float(value.strip())
            except ValueError:
                return None
            return seconds if 0 <= seconds < 1e6 else None
    return None


def _close(sock: gsocket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


class _Attempt:
    """Callbacks from the HTTP parser for one attempt; fills the record as bytes arrive."""

    __slots__ = (
        "_record_token_times",
        "body",
        "body_timing",
        "dialect",
        "ft_batch",
        "ft_clock",
        "ft_read_ns",
        "head",
        "headers_ns",
        "interp",
        "ok",
        "parser",
        "stream_wanted",
        "tool_calls",
    )

    def __init__(
        self, dialect: str, stream_wanted: bool, record_token_times: bool, tool_calls: list[ToolCall] | None = None
    ) -> None:
        self.tool_calls = tool_calls  # when a list: the answer's tool calls are assembled into it
        self.dialect = dialect
        self.stream_wanted = stream_wanted
        self.head: ResponseHead | None = None
        self.headers_ns: int | None = None
        self.interp: StreamInterpreter | None = None
        self.ok = False  # a 2xx answer: its body is read whole (an error body only up to MAX_ERROR_BODY)
        self.body = bytearray()
        self.body_timing: dict[str, float] = {}  # a whole JSON answer's ``metrics`` (as record fields)
        self._record_token_times = record_token_times
        self.parser: ResponseParser | None = None  # when set, stream bytes go straight to the interpreter
        # how the first token was timed (the reactor's Stream sets them): the kernel's receive stamp or recv's
        # return, when the loop read those bytes, and how many tokens that one read held
        self.ft_clock: str | None = None
        self.ft_read_ns: int | None = None
        self.ft_batch: int | None = None

    def on_headers(self, head: ResponseHead, now_ns: int) -> None:
        self.head = head
        self.headers_ns = now_ns
        self.ok = 200 <= head.status < 300
        ctype = head.content_type
        if 200 <= head.status < 300 and self.stream_wanted and ctype != "application/json":
            interp = self.interp = StreamInterpreter(self.dialect, self._record_token_times)
            interp.head = self.body  # it keeps the body's start (HEAD_BYTES) in our buffer
            if self.tool_calls is not None:
                interp.tools = ToolCallCollector()
            if self.parser is not None:
                self.parser.body_cb = interp.feed  # one call layer less per chunk

    def on_body(self, chunk: bytes, now_ns: int) -> None:
        if self.interp is not None:
            self.interp.feed(chunk, now_ns)  # keeps the start: names an HTML page or garbage
        elif self.ok:
            self.body += chunk
            if len(self.body) > MAX_BODY:
                raise ResponseTooLarge(BODY_TOO_LARGE)
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
    tool_calls: list[ToolCall] | None = None,
) -> None:
    """Send one attempt and fill ``record`` with what happened; raises ``Cancelled`` after filling it.

    With a ``tool_calls`` list, the answer's tool calls (streamed or in a whole body) are appended to it.

    A request written into a reused keep-alive connection that then dies before any response byte
    (the server had closed it while idle, so it never saw the request) is sent once more on a fresh
    connection, and the record says ``reconnected``. A fresh connection is never retried.
    """
    attempt = _Attempt(dialect, stream, record_token_times, tool_calls)
    parser = ResponseParser(attempt.on_headers, attempt.on_body)
    attempt.parser = parser
    sock: gsocket.socket | None = None
    keep = False
    eof = False
    start = time.monotonic_ns()
    record.sent_ns = start - anchor_ns
    ttft_deadline = start + int(timeouts.ttft_s * 1e9)
    total_deadline = start + int(timeouts.total_s * 1e9)

    def deadline(att: _Attempt, now: int) -> int:
        return _deadline_ns(att, ttft_deadline, total_deadline, now)

    end_ns: int | None = None
    cancelled: Cancelled | None = None
    retried = False
    try:
        while True:
            sock, reused = pool.acquire(timeouts.connect_s)
            may_retry = reused and not retried
            if USE_REACTOR and type(sock) is gsocket.socket:
                stamp_receives(sock)
            try:
                sock.sendall(request)
            except OSError:
                if not may_retry:
                    raise  # a fresh connection that fails to send is a real transport error
                _close(sock)
                sock = None
                retried = record.reconnected = True
                continue
            # No timeout on the socket: waiting for bytes allocates no timer; the deadlines are per
            # phase (first token, streaming, after the end marker), and every read is also checked
            # against the phase's deadline, in case the loop ran late.
            sock.settimeout(None)
            if USE_REACTOR and type(sock) is gsocket.socket:
                end_ns, eof, stale = _read_reactor(sock, parser, attempt, deadline, may_retry)
            else:
                end_ns, eof, stale = _read_greenlet(sock, parser, attempt, deadline, may_retry)
            if not stale:
                break
            _close(sock)
            sock = None
            retried = record.reconnected = True
        keep = parser.done and not eof and attempt.head is not None and attempt.head.keep_alive
        if not parser.done:
            if attempt.head is None:
                record.transport_error = True
                record.error = "connection closed before a response"
            elif attempt.interp is None or not attempt.interp.complete:
                record.error = "connection closed before the end of the response"
    # one name per clause: compiled (mypyc), a name bound by several clauses is typed by the first of them
    except Cancelled as stop:
        cancelled = stop
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
    except ResponseTooLarge as over:  # the header block (raised by the parser itself)
        _too_large(record, attempt, over)
    except httptools.HttpParserError as garbled:
        cause = garbled.__context__  # an exception in a body callback comes wrapped by httptools
        if isinstance(cause, ResponseTooLarge):
            _too_large(record, attempt, cause)
        else:
            record.transport_error = True
            record.error = short_text(f"malformed HTTP response: {garbled}")
    except OSError as failed:
        record.transport_error = True
        name = errno.errorcode.get(failed.errno or 0, type(failed).__name__)
        record.error = short_text(f"{name}: {failed.strerror or failed}")
    finally:
        parser.close()
        attempt.parser = None
        if end_ns is None:
            end_ns = time.monotonic_ns()
        if sock is not None:
            if keep and attempt.head is not None:
                pool.release(sock, server_keepalive_s(attempt.head.headers))
            else:
                _close(sock)
    _fill(record, attempt, anchor_ns, end_ns)
    if cancelled is not None:
        raise cancelled


def _read_reactor(
    sock: gsocket.socket, parser: ResponseParser, attempt: _Attempt, deadline: Any, may_retry: bool
) -> tuple[int | None, bool, bool]:
    """Read the response through the process's reactor: this greenlet sleeps until the first token, the end
    marker, the end, an error or the deadline. Returns (end ns, eof, stale); raises what the reading raised."""
    stream = Stream(sock, parser, attempt, _phase, deadline, may_retry)
    loop = reactor()
    loop.add(stream)
    try:
        stream.wait()
    finally:
        loop.remove(stream)  # a deadline or a cancel: the reactor must let go before the socket closes
    if stream.error is not None:
        raise stream.error
    return stream.end_ns, stream.eof, stream.stale


def _read_greenlet(
    sock: gsocket.socket, parser: ResponseParser, attempt: _Attempt, deadline: Any, may_retry: bool
) -> tuple[int | None, bool, bool]:
    """Read the response in this greenlet (TLS sockets, and the benchmark's "before" row): it wakes for
    every chunk. Returns (end ns, eof, stale); raises on errors and deadlines.

    One timer per phase, re-armed only when the phase changes. A plain socket is read by waiting for
    readability, then one recv on the real socket (gevent's recv tries first, and that fails with
    EAGAIN, an exception, on nearly every streamed token); TLS sockets go through gevent's recv.
    """
    plain = type(sock) is gsocket.socket
    raw_recv = sock._sock.recv if plain else sock.recv
    read_event = sock._read_event if plain else None
    wait = sock._wait
    timer: gevent.Timeout | None = None
    phase_now = -1
    deadline_at = 0
    end_ns: int | None = None
    ready = False  # the last read filled the buffer: more is probably waiting
    burst = 0  # reads (plain) or bytes (TLS) since the greenlet last went back to the hub
    try:
        while not parser.done:
            if _phase(attempt) != phase_now:
                phase_now = _phase(attempt)
                now = time.monotonic_ns()
                deadline_at = deadline(attempt, now)
                remaining = deadline_at - now
                if remaining <= 0:
                    raise TimeoutError
                if timer is not None:
                    timer.close()
                timer = gevent.Timeout(remaining / 1e9, _Deadline)
                timer.start()
            try:
                if plain:
                    if not ready:
                        wait(read_event)
                        burst = 0
                    try:
                        data = raw_recv(RECV_BYTES)
                    except BlockingIOError:
                        ready = False
                        continue
                    burst += 1
                    ready = len(data) == RECV_BYTES and burst < MAX_READS_PER_WAKE
                else:
                    data = raw_recv(RECV_BYTES)
                    # gevent's SSL recv does not say whether it waited: count the bytes since
                    # the last yield instead, and past a wake-up's worth wait for the socket to
                    # be readable, a real turn of the loop (gevent.sleep(0) lets other greenlets
                    # run but seldom lets the loop fire timers); unless TLS holds decrypted bytes
                    burst += len(data)
                    if burst >= TLS_BYTES_PER_YIELD:
                        burst = 0
                        if sock.pending():
                            gevent.sleep(0)
                        else:
                            gevent.get_hub().wait(sock._read_event)
            except OSError as exc:
                if may_retry and exc.errno in _STALE_ERRNOS and not parser.received_any:
                    return None, False, True
                raise
            now = time.monotonic_ns()
            if not data:
                if may_retry and not parser.received_any:
                    return None, False, True
                parser.feed_eof()
                return now, True, False
            if now >= deadline_at:
                raise _Deadline
            parser.feed(data, now)
            if parser.done:
                end_ns = now
        return end_ns, False, False
    finally:
        if timer is not None:
            timer.close()


def _too_large(record: RequestRecord, attempt: _Attempt, exc: ResponseTooLarge) -> None:
    """A response part passed its cap: the reading stopped there, and the record names the cap."""
    record.error = str(exc)
    if attempt.head is None:
        record.transport_error = True  # no HTTP answer was ever complete enough to have a status
    attempt.body.clear()  # a capped body is not an answer: nothing of it is interpreted


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
        if interp.first_token_ns is not None:
            # a read the reactor did not stamp (TLS, the plain loop) was stamped when recv returned
            record.first_token_clock = attempt.ft_clock or FIRST_TOKEN_RECV
            read_ns = attempt.ft_read_ns if attempt.ft_read_ns is not None else interp.first_token_ns
            record.first_token_read_ns = read_ns - anchor_ns
            record.first_token_batch = attempt.ft_batch
        if interp.tools is not None and attempt.tool_calls is not None:
            attempt.tool_calls.extend(interp.tools.calls())
    elif 200 <= head.status < 300:
        facts = interpret_body(attempt.dialect, bytes(attempt.body))
        if attempt.tool_calls is not None:
            attempt.tool_calls.extend(facts.get("tool_calls") or [])
        if facts.get("has_output"):
            record.complete = record.error is None
            record.first_token_ns = record.last_token_ns = record.done_ns
            record.tokens = 1
            record.first_token_clock = FIRST_TOKEN_RECV  # the body's end, read by the loop
            record.first_token_read_ns = record.done_ns
        record.prompt_tokens = facts.get("prompt_tokens")
        record.output_tokens = facts.get("output_tokens")
        record.cached_tokens = facts.get("cached_tokens")
        record.service_tier = facts.get("service_tier")
        attempt.body_timing = facts.get("timing") or {}
        if facts.get("error"):
            record.error = record.error or facts["error"]
            reason = reason or facts.get("reason")
    else:
        body = bytes(attempt.body)
        text_reason, text = _error_body(body)
        reason = reason or text_reason
        record.error = record.error or text
    record.reason = reason or record.reason
    # the server's own timing, raw: a gateway's headers on any answer, the engine's ``metrics`` in the body
    body_timing = interp.timing if interp is not None else attempt.body_timing
    for name, value in {**from_headers(headers), **body_timing}.items():
        setattr(record, name, value)


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
