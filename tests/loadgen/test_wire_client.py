"""The gevent wire client against a scripted hostile server: every attempt ends as a record of facts."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from wire_fakes import FakeServer

from rushhour.loadgen.engine.wire.client import ConnectionPool, Timeouts, perform
from rushhour.loadgen.engine.wire.dialects import build_body
from rushhour.loadgen.engine.wire.http import Endpoint, build_request
from rushhour.loadgen.prompts import Conversation
from rushhour.records.record import Anchor, RequestRecord


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.close()


def attempt(
    port: int,
    mode: str,
    dialect: str = "openai-chat",
    pool: ConnectionPool | None = None,
    timeouts: Timeouts | None = None,
    stream: bool = True,
) -> tuple[RequestRecord, ConnectionPool]:
    ep = Endpoint.parse(f"http://127.0.0.1:{port}")
    pool = pool or ConnectionPool(ep)
    path, body = build_body(dialect, "m", Conversation("", [("user", "hello")]), 5, stream)
    req = build_request(ep, path, {"x-mode": mode, "x-silent-s": "2"}, body)
    rec = RequestRecord(run_id="r", seq=1, request_id="id", logical_id="l", tier="t", tenant="x", persona="p")
    anchor = Anchor.now()
    perform(
        pool,
        req,
        rec,
        anchor_ns=anchor.mono_ns,
        dialect=dialect,
        stream=stream,
        timeouts=timeouts or Timeouts(connect_s=1, ttft_s=5, total_s=5),
    )
    return rec, pool


def test_ok_stream_timings_usage_and_keepalive(server: FakeServer) -> None:
    rec, pool = attempt(server.port, "ok")
    assert rec.status == 200 and rec.complete and rec.tokens == 3
    assert rec.sent_ns is not None and rec.headers_ns is not None and rec.first_token_ns is not None
    assert rec.sent_ns <= rec.headers_ns <= rec.first_token_ns <= (rec.last_token_ns or 0) <= (rec.done_ns or 0)
    assert (rec.prompt_tokens, rec.output_tokens, rec.cached_tokens, rec.service_tier) == (7, 3, 4, "flex")
    assert rec.itl_max_ns and rec.itl_max_ns >= 3_000_000  # the server waits 5 ms between events
    again, _ = attempt(server.port, "ok", pool=pool)
    assert again.complete and pool.opened == 1  # the keep-alive connection was reused


def test_anthropic_stream(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "anthropic", dialect="anthropic-messages")
    assert rec.complete and rec.tokens == 2 and rec.prompt_tokens == 7 and rec.service_tier == "priority"


def test_in_band_error(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "inband")
    assert rec.status == 200 and rec.in_band_error == "Request waiting timeout reached."
    assert rec.reason == "SERVICE_UNAVAILABLE"


def test_malformed_sse(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "malformed")
    assert rec.status == 200 and rec.error and "malformed" in rec.error and rec.tokens == 1


def test_html_answer(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "html")
    assert rec.status == 200 and not rec.complete and rec.error and "Bad Gateway" in rec.error


def test_429_reason_retry_after_and_redaction(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "429")
    assert rec.status == 429 and rec.reason == "rate_limit_exceeded" and rec.retry_after_s == 1.5
    assert rec.error is not None and "sk-abcdefghijklmnopqrstuv" not in rec.error


def test_llmd_dropped_reason_header(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "llmd429")
    assert rec.status == 429 and rec.reason == "rejected-saturated" and "queue at capacity" in (rec.error or "")


def test_truncated_stream(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "truncate")
    assert rec.status == 200 and not rec.complete and rec.tokens == 1 and "closed" in (rec.error or "")


def test_reset(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "reset")
    assert not rec.complete and (rec.transport_error or "closed" in (rec.error or ""))


def test_silent_server_hits_ttft_timeout(server: FakeServer) -> None:
    t0 = time.monotonic()
    rec, _ = attempt(server.port, "silent", timeouts=Timeouts(connect_s=1, ttft_s=0.3, total_s=5))
    # ended by the 0.3 s deadline, not by the server closing after its 3 s of silence (generous when busy)
    assert rec.client_timeout and rec.status == 0 and time.monotonic() - t0 < 0.3 + 2.0


def test_garbage_http(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "garbage")
    assert rec.transport_error and "malformed HTTP" in (rec.error or "")


def test_refused() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    rec, _ = attempt(port, "ok")
    assert rec.transport_error and rec.status == 0 and "ECONNREFUSED" in (rec.error or "")


def test_non_streaming_json(server: FakeServer, tmp_path: Path) -> None:
    rec, _ = attempt(server.port, "429", stream=False)
    assert rec.status == 429 and not rec.complete


def test_server_timing_from_a_whole_answer(server: FakeServer) -> None:
    rec, _ = attempt(server.port, "timed", stream=False)
    assert rec.status == 200 and rec.complete
    assert (rec.metrics_queue_time_ms, rec.metrics_time_to_first_token_ms) == (120.5, 8.25)
    assert rec.metrics_mean_itl_ms is None and rec.litellm_response_duration_ms is None  # -3 and 1e400: left out
    assert (rec.litellm_overhead_duration_ms, rec.gateway_queue_ms) == (12.5, 40.0)
