"""The client's read loop: big reads, phase deadlines (one timer per phase), no cyclic garbage."""

from __future__ import annotations

import contextlib
import gc
import socket
import threading
import time
from collections.abc import Callable, Iterator

import gevent
import pytest

from rushhour.loadgen.engine.wire.client import ConnectionPool, Timeouts, perform
from rushhour.loadgen.engine.wire.http import Endpoint, build_request
from rushhour.loadgen.engine.wire.reactor import reactor
from rushhour.records.record import RequestRecord

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n"


def _read_request(conn: socket.socket) -> bool:
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            return False
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    need = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    while len(body) < need:
        body += conn.recv(65536)
    return True


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], int]]:
    """A one-connection server running ``script(conn)`` for each request on it."""
    socks: list[socket.socket] = []

    def start(script: Callable[[socket.socket], None]) -> int:
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        socks.append(lsock)

        def run() -> None:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            socks.append(conn)
            with conn, contextlib.suppress(OSError):  # closed by the teardown
                while _read_request(conn):
                    script(conn)

        threading.Thread(target=run, daemon=True).start()
        return int(lsock.getsockname()[1])

    yield start
    for s in socks:
        s.close()


def attempt(port: int, timeouts: Timeouts, pool: ConnectionPool | None = None) -> tuple[RequestRecord, ConnectionPool]:
    ep = Endpoint.parse(f"http://127.0.0.1:{port}")
    pool = pool or ConnectionPool(ep)
    rec = RequestRecord(run_id="r", seq=1, request_id="id", logical_id="l", tier="t", tenant="x", persona="p")
    perform(
        pool,
        build_request(ep, "/v1/chat/completions", {}, b"{}"),
        rec,
        anchor_ns=0,
        dialect="openai-chat",
        stream=True,
        timeouts=timeouts,
    )
    return rec, pool


def test_a_body_larger_than_one_read_is_read_whole_and_reused(serve: Callable[..., int]) -> None:
    n = 5000  # ~320 KB in one write: several full 64 KiB reads in a row

    def script(conn: socket.socket) -> None:
        conn.sendall(HEAD + chunked(CHUNK * n) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")

    port = serve(script)
    rec, pool = attempt(port, Timeouts(1, 5, 5))
    assert (rec.tokens, rec.complete, rec.error) == (n, True, None)
    rec2, _ = attempt(port, Timeouts(1, 5, 5), pool)
    assert (rec2.tokens, rec2.complete) == (n, True)
    assert pool.opened == 1


# serial: the 0.4 s deadline must fire within 1.2 s (not at the server's 1.5 s close): a wake-up bound
@pytest.mark.serial
def test_total_deadline_after_the_first_token(serve: Callable[..., int]) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(HEAD + chunked(CHUNK))
        time.sleep(1.5)

    rec, _ = attempt(serve(script), Timeouts(1, 5, 0.4))
    assert rec.client_timeout and rec.tokens == 1
    assert rec.error == "client timeout waiting for the response"
    assert 0.35e9 < (rec.done_ns or 0) - (rec.sent_ns or 0) < 1.2e9


def test_ttft_deadline_with_headers_but_no_token(serve: Callable[..., int]) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(HEAD + chunked(b": ping\n\n"))
        time.sleep(1.5)

    rec, _ = attempt(serve(script), Timeouts(1, 0.3, 5))
    assert rec.client_timeout and rec.tokens == 0 and rec.status == 200
    assert rec.error == "client timeout waiting for the first token"


# serial: the 1 s grace must end the read before 2 s (the server closes at 2.5 s): a wake-up bound
@pytest.mark.serial
def test_end_marker_without_http_end_is_complete_after_the_grace(serve: Callable[..., int]) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(HEAD + chunked(CHUNK + b"data: [DONE]\n\n"))
        time.sleep(2.5)  # never sends the last chunk

    rec, _ = attempt(serve(script), Timeouts(1, 5, 10))
    assert rec.complete and not rec.client_timeout and rec.tokens == 1
    assert (rec.done_ns or 0) - (rec.sent_ns or 0) < 2.0e9  # the 1 s grace, not the 10 s total


def test_an_attempt_leaves_no_cyclic_garbage(serve: Callable[..., int]) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(HEAD + chunked(CHUNK * 3 + b"data: [DONE]\n\n") + b"0\r\n\r\n")

    port = serve(script)
    _, pool = attempt(port, Timeouts(1, 5, 5))  # warm up: connection, imports
    while reactor()._collector.running:  # its policy let go (it freezes survivors while streams run)
        gevent.sleep(0.05)
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            rec, _ = attempt(port, Timeouts(1, 5, 5), pool)
            assert rec.complete
        del rec
        assert gc.collect() == 0
    finally:
        gc.enable()
