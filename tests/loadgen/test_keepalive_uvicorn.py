"""Stale keep-alive connections against a real uvicorn server (the server vLLM and LiteLLM run on).

Uvicorn closes a connection that stayed idle longer than ``timeout_keep_alive``. A request written
into such a connection dies before any response byte; before the fix it was recorded as a
``transport`` error ("connection closed before a response") for a request the server never saw.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rushhour.loadgen.engine.wire.client import ConnectionPool, Timeouts, perform, server_keepalive_s
from rushhour.loadgen.engine.wire.dialects import build_body
from rushhour.loadgen.engine.wire.http import Endpoint, build_request
from rushhour.loadgen.prompts import Conversation
from rushhour.records.record import Anchor, RequestRecord

pytestmark = pytest.mark.e2e
APP = Path(__file__).resolve().with_name("uvicorn_sse.py")
KEEP_ALIVE_S = 1.0  # the server's idle timeout
GAP_S = 1.6  # idle time between requests: longer than the server keeps a connection


@pytest.fixture(scope="module")
def uvicorn_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port_file = tmp_path_factory.mktemp("uvicorn") / "port"
    proc = subprocess.Popen(
        [sys.executable, str(APP), "--port-file", str(port_file), "--keep-alive", str(KEEP_ALIVE_S)],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None, "uvicorn exited at start-up"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield int(port_file.read_text())
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _send(port: int, pool: ConnectionPool, extra: dict[str, str] | None = None) -> RequestRecord:
    ep = Endpoint.parse(f"http://127.0.0.1:{port}")
    path, body = build_body("openai-chat", "m", Conversation("", [("user", "hi")]), 5, True)
    rid = uuid.uuid4().hex
    req = build_request(ep, path, {"x-request-id": rid, **(extra or {})}, body)
    rec = RequestRecord(run_id="r", seq=1, request_id=rid, logical_id=rid, tier="t", tenant="x", persona="p")
    perform(pool, req, rec, anchor_ns=Anchor.now().mono_ns, dialect="openai-chat", stream=True,
            timeouts=Timeouts(connect_s=2, ttft_s=10, total_s=10))
    return rec


def _seen(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/seen", timeout=10) as resp:
        seen: dict[str, int] = json.loads(resp.read())
        return seen


def _served(rec: RequestRecord) -> bool:
    return rec.status == 200 and rec.complete and rec.tokens == 3 and not rec.transport_error and rec.error is None


def test_request_on_a_connection_the_server_closed_is_resent_once(uvicorn_port: int) -> None:
    """Idle expiry off: every request after an idle gap goes into a connection uvicorn has closed."""
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{uvicorn_port}"), keepalive_s=3600)
    records = [_send(uvicorn_port, pool)]
    for _ in range(3):
        time.sleep(GAP_S)
        records.append(_send(uvicorn_port, pool))
    assert all(_served(r) for r in records), [(r.status, r.error) for r in records]
    assert not records[0].reconnected
    assert all(r.reconnected for r in records[1:])  # each found its pooled connection closed
    assert pool.opened == len(records)
    seen = _seen(uvicorn_port)
    assert [seen.get(r.request_id) for r in records] == [1] * len(records)  # never sent twice


def test_back_to_back_requests_reuse_the_connection(uvicorn_port: int) -> None:
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{uvicorn_port}"))
    records = [_send(uvicorn_port, pool) for _ in range(5)]
    assert all(_served(r) and not r.reconnected for r in records)
    assert pool.opened == 1


def test_idle_connection_older_than_the_keepalive_is_dropped_before_reuse(uvicorn_port: int) -> None:
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{uvicorn_port}"), keepalive_s=0.5)
    records = [_send(uvicorn_port, pool)]
    for _ in range(2):
        time.sleep(GAP_S)
        records.append(_send(uvicorn_port, pool))
    assert all(_served(r) and not r.reconnected for r in records)  # never written into a dead connection
    assert pool.expired == 2 and pool.opened == 3
    seen = _seen(uvicorn_port)
    assert [seen.get(r.request_id) for r in records] == [1, 1, 1]


def test_server_keepalive_header_shortens_the_idle_limit(uvicorn_port: int) -> None:
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{uvicorn_port}"), keepalive_s=3600)
    first = _send(uvicorn_port, pool, {"x-keepalive-header": "1.5"})  # keep it at most 0.5 s
    time.sleep(GAP_S)
    second = _send(uvicorn_port, pool)
    assert _served(first) and _served(second) and not second.reconnected
    assert pool.expired == 1


def test_keepalive_header_parsing() -> None:
    assert server_keepalive_s({"keep-alive": "timeout=5, max=100"}) == 5.0
    assert server_keepalive_s({"keep-alive": "max=100"}) is None
    assert server_keepalive_s({"keep-alive": "timeout=abc"}) is None
    assert server_keepalive_s({"keep-alive": "timeout=inf"}) is None
    assert server_keepalive_s({}) is None
