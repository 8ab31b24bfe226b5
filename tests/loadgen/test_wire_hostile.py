"""Responses that never end, at full speed: each attempt ends at its cap or deadline, and the rest of the
process (other users, timers, the run's stop) keeps running meanwhile.

Before the fix a flooding server kept ``recv`` returning full buffers, so the reading greenlet never
went back to the gevent hub: no deadline fired, no other greenlet ran, and the buffer grew without bound.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import gevent
import pytest
from test_wire_client import attempt
from wire_fakes import FakeServer

from rushhour.loadgen.engine.wire.client import Cancelled, ConnectionPool, Timeouts, client_tls_context, perform
from rushhour.loadgen.engine.wire.http import Endpoint, build_request
from rushhour.records.record import Anchor, RequestRecord

pytestmark = pytest.mark.timeout(120)  # before the fix, these hung until killed


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.close()


class _Others:
    """Other users of the same process: a ticker and a stream of normal requests, counted."""

    def __init__(self, port: int) -> None:
        self.ticks = 0
        self.served = 0
        self.port = port
        self.greenlets = [gevent.spawn(self._tick), gevent.spawn(self._requests)]

    def _tick(self) -> None:
        while True:
            gevent.sleep(0.02)
            self.ticks += 1

    def _requests(self) -> None:
        pool = None
        while True:
            rec, pool = attempt(self.port, "ok", pool=pool)
            self.served += rec.complete

    def stop(self) -> None:
        gevent.killall(self.greenlets)


def _run_with_others(
    port: int, mode: str, timeouts: Timeouts, stream: bool = True
) -> tuple[RequestRecord, _Others, float]:
    others = _Others(port)
    t0 = time.monotonic()
    try:
        rec, _ = gevent.spawn(attempt, port, mode, timeouts=timeouts, stream=stream).get(timeout=60)
    finally:
        elapsed = time.monotonic() - t0
        others.stop()
    return rec, others, elapsed


def test_never_ending_event_is_cut_at_the_cap(server: FakeServer) -> None:
    rec, _, _ = _run_with_others(server.port, "flood", Timeouts(connect_s=1, ttft_s=30, total_s=30))
    assert rec.status == 200 and not rec.complete and rec.error == "SSE event over 1 MiB"
    assert not rec.client_timeout and not rec.transport_error and rec.tokens == 0


def test_never_ending_header_block_is_cut_at_the_cap(server: FakeServer) -> None:
    rec, _, _ = _run_with_others(server.port, "floodhead", Timeouts(connect_s=1, ttft_s=30, total_s=30))
    assert rec.status == 0 and rec.transport_error and rec.error == "response header block over 64 KiB"


def test_trickled_header_block_ends_at_the_first_token_deadline(server: FakeServer) -> None:
    rec, others, elapsed = _run_with_others(server.port, "tricklehead", Timeouts(connect_s=1, ttft_s=1, total_s=30))
    assert rec.status == 0 and rec.client_timeout and rec.error == "client timeout waiting for the first token"
    assert elapsed < 15 and others.served >= 1


def test_flood_of_valid_events_ends_at_its_deadline_while_others_run(server: FakeServer) -> None:
    """Valid events at full speed never trip a cap: only the deadline ends them, so it has to fire."""
    rec, others, elapsed = _run_with_others(server.port, "floodevents", Timeouts(connect_s=1, ttft_s=2, total_s=2))
    assert rec.status == 200 and not rec.complete and rec.client_timeout and rec.tokens > 1000
    assert rec.error == "client timeout waiting for the response"
    assert elapsed < 15  # ~2 s; before the fix it never ended
    # the rest of the process kept running: the 20 ms ticker and another user's requests
    assert others.ticks >= 10 and others.served >= 2


def test_flood_is_cancelled_at_the_hard_stop(server: FakeServer) -> None:
    ep = Endpoint.parse(f"http://127.0.0.1:{server.port}")
    req = build_request(ep, "/v1/chat/completions", {"x-mode": "floodevents"}, b"{}")
    rec = RequestRecord(run_id="r", seq=1, request_id="id", logical_id="l", tier="t", tenant="x", persona="p")

    def run() -> None:
        perform(ConnectionPool(ep), req, rec, anchor_ns=Anchor.now().mono_ns, dialect="openai-chat", stream=True,
                timeouts=Timeouts(connect_s=1, ttft_s=60, total_s=60))

    g = gevent.spawn(run)
    gevent.sleep(0.5)
    t0 = time.monotonic()
    g.kill(exception=Cancelled, block=True, timeout=10)  # what the worker does at the run's hard stop
    assert g.dead and time.monotonic() - t0 < 5
    assert rec.cancelled and rec.status == 200 and rec.tokens > 0 and rec.done_ns is not None


def test_complete_2xx_json_over_64_kib_is_served(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "bigjson", stream=False)
    assert rec.status == 200 and rec.complete and rec.error is None
    assert rec.prompt_tokens == 9 and rec.output_tokens == 40000


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeServer, Path]]:
    """The same hostile server over HTTPS, with a throw-away self-signed certificate for 127.0.0.1."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv = FakeServer(tls=context).start()
    yield srv, cert
    srv.close()


def _tls_attempt(port: int, cert: Path, mode: str, timeouts: Timeouts) -> RequestRecord:
    ep = Endpoint.parse(f"https://127.0.0.1:{port}")
    pool = ConnectionPool(ep)
    pool._ssl_context = client_tls_context(str(cert))  # trust the test certificate
    req = build_request(ep, "/v1/chat/completions", {"x-mode": mode}, b"{}")
    rec = RequestRecord(run_id="r", seq=1, request_id="id", logical_id="l", tier="t", tenant="x", persona="p")
    perform(pool, req, rec, anchor_ns=Anchor.now().mono_ns, dialect="openai-chat", stream=True, timeouts=timeouts)
    return rec


def test_tls_flood_is_cut_at_the_cap_and_valid_flood_at_the_deadline(tls_server: tuple[FakeServer, Path]) -> None:
    """An SSL socket reads from its own buffer, so the loop yields by hand there: same outcomes as plain."""
    srv, cert = tls_server
    ok = _tls_attempt(srv.port, cert, "ok", Timeouts(connect_s=2, ttft_s=5, total_s=5))
    assert ok.complete and ok.tokens == 3
    rec = _tls_attempt(srv.port, cert, "flood", Timeouts(connect_s=2, ttft_s=30, total_s=30))
    assert rec.status == 200 and rec.error == "SSE event over 1 MiB"
    ticks = [0]

    def tick() -> None:
        while True:
            gevent.sleep(0.02)
            ticks[0] += 1

    ticker = gevent.spawn(tick)
    t0 = time.monotonic()
    try:
        rec = _tls_attempt(srv.port, cert, "floodevents", Timeouts(connect_s=2, ttft_s=2, total_s=2))
    finally:
        ticker.kill()
    assert rec.client_timeout and rec.tokens > 1000 and time.monotonic() - t0 < 15
    assert ticks[0] >= 10  # the process kept running while the flood was read
