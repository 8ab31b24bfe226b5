"""`python -m rushhour.testbed` as a subprocess: port file, serving, SIGTERM by PID, ledger file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def _start(tmp_path: Path, speed: str, stdout: int) -> tuple[subprocess.Popen[str], int, Path]:
    """`python -m rushhour.testbed` on an ephemeral port; returns the process, its port and its ledger path."""
    port_file, ledger = tmp_path / "port", tmp_path / "ledger.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rushhour.testbed", "--port", "0", "--port-file", str(port_file), "--ledger", str(ledger),
         "--preset", "tiny", "--replicas", "1", "--speed", speed],
        stdout=stdout, stderr=subprocess.PIPE, text=True)
    for _ in range(200):
        if port_file.exists():
            return proc, int(port_file.read_text()), ledger
        time.sleep(0.05)
    proc.kill()  # never leave a server behind when it did not come up
    proc.wait()
    raise AssertionError(f"testbed did not start: {proc.stderr.read() if proc.stderr else ''}")


@pytest.mark.e2e
def test_cli_port_file_sigterm_and_ledger(tmp_path: Path) -> None:
    proc, port, ledger = _start(tmp_path, "0.05", subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"testbed listening on http://127.0.0.1:{port}"
        body = json.dumps({"model": "testbed", "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 2}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                     {"x-request-id": "done-1", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200 and resp.headers["x-request-id"] == "done-1"
        # a long request still running when the server stops must end in the ledger as cancelled
        import socket

        s = socket.create_connection(("127.0.0.1", port))
        long_body = json.dumps({"model": "testbed", "messages": [{"role": "user", "content": "hi"}],
                                "max_tokens": 3000, "stream": True}).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: inflight\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(long_body), long_body))
        assert s.recv(100).startswith(b"HTTP/1.1 200")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        s.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    recs = {r["request_id"]: r for r in map(json.loads, ledger.read_text().splitlines())}
    assert recs["done-1"]["outcome"] == "served"
    assert recs["inflight"]["outcome"] == "cancelled" and recs["inflight"]["status"] == 200


@pytest.mark.e2e
def test_client_disconnects_are_cancelled_not_failed(tmp_path: Path) -> None:
    """A client that hangs up mid-stream or before the head is `cancelled` in the ledger, never `failed`."""
    import socket

    proc, port, ledger = _start(tmp_path, "0.2", subprocess.DEVNULL)
    try:
        body = json.dumps({"model": "testbed", "messages": [{"role": "user", "content": "x" * 6000}],
                           "max_tokens": 500, "stream": True}).encode()
        for rid, read_head in (("after-head", True), ("before-head", False)):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: %b\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                      % (rid.encode(), len(body), body))
            if read_head:
                assert s.recv(100).startswith(b"HTTP/1.1 200")
            s.close()
        deadline = time.monotonic() + 60  # the loop ends as soon as both are in the ledger
        recs: dict[str, dict[str, object]] = {}
        while time.monotonic() < deadline and len(recs) < 2:
            time.sleep(0.1)
            recs = {r["request_id"]: r for r in map(json.loads, ledger.read_text().splitlines())}
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert recs["after-head"]["outcome"] == "cancelled"
    assert recs["before-head"]["outcome"] == "cancelled"
    assert "Traceback" not in err


def test_bad_config_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "tb.yaml"
    bad.write_text("replicas: 0\n")
    p = subprocess.run([sys.executable, "-m", "rushhour.testbed", "--config", str(bad)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "replicas" in p.stderr


def test_a_port_out_of_range_is_refused_not_wrapped() -> None:
    # the kernel would bind 70000 as 4464 (70000 mod 65536) and the testbed would serve on a port nobody asked for
    p = subprocess.run([sys.executable, "-m", "rushhour.testbed", "--port", "70000"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "70000 is not a port" in p.stderr and "Traceback" not in p.stderr
    from typer.testing import CliRunner

    from rushhour.cli import app

    res = CliRunner().invoke(app, ["serve", "--port", "70000"])
    assert res.exit_code == 2 and "65535" in res.output
