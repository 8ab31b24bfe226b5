"""A server that echoes keys back, whole, without prefix, in part or as ``key=…``: no run file holds them."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rushhour.audit import report_table, run_audit
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.record import ECHO_MIN
from rushhour.reports import write_reports

pytestmark = pytest.mark.e2e

KEY = "sk-proj-Zq7Wm3Rt9Yp2Lk5Hv8Nb4Xc6Jd1Fg0Ts"  # the tier's credential (Authorization: Bearer …)
CORE = KEY.removeprefix("sk-proj-")
HEADER_KEY = "hk9Qw2Er5Ty8Ui1Op4As7Df0Gh3Jk6Lz"  # an extra header given as env:VAR

SCENARIO = """
name: echo
target: {{url: "http://127.0.0.1:{port}", profile: openai, model: m, metrics: null}}
tiers:
  - name: t
    credential: env:RH_TEST_KEY
    headers: {{x-api-key: "env:RH_TEST_HEADER_KEY"}}
resilience:
  timeouts: {{connect_s: 2, ttft_s: 2, total_s: 3}}
calibration: {{probes: 0}}
personas:
  - {{kind: chat, name: c, tier: t, arrival: {{process: constant, rate: 8}}, turns: 1,
     system_prompt_tokens: 0, prompt_tokens: 8, output_tokens: 4}}
phases: [{{name: p, duration: 2s}}]
drain_s: 2
"""


def _echoes(auth: str, header_key: str) -> list[tuple[int, str, bytes]]:
    """Every way a careless or hostile server might reflect what it was sent."""
    bearer = auth.removeprefix("Bearer ")
    core = bearer.removeprefix("sk-proj-")
    err = {"error": {"message": f"invalid api key {core}", "type": "invalid_request_error"}}
    return [
        (401, "application/json", json.dumps(err).encode()),
        (401, "text/plain", f"key fragment {core[3:3 + ECHO_MIN + 2]} rejected".encode()),
        (400, "text/plain", f"see https://x.example/v1?api_key={header_key}&y=1 or token={core}".encode()),
        (403, "text/plain", f"forbidden for {auth} and x-api-key: {header_key}".encode()),
        (200, "text/event-stream",
         b'data: {"error": {"message": "expired ' + bearer.encode() + b'", "code": 401}}\n\n'),
    ]


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    count = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        with self.lock:
            _Echo.count += 1
            n = _Echo.count
        answers = _echoes(self.headers.get("authorization", ""), self.headers.get("x-api-key", ""))
        status, ctype, body = answers[n % len(answers)]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-echo", CORE)  # a response header echoing it too
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _leaks(run_dir: Path) -> list[str]:
    """Files of the run folder holding a key, its core, or any ECHO_MIN characters of either."""
    needles = {KEY, CORE, HEADER_KEY}
    for secret in (CORE, HEADER_KEY):
        needles |= {secret[i:i + ECHO_MIN] for i in range(len(secret) - ECHO_MIN + 1)}
    found = []
    for path in sorted(run_dir.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(run_dir)}: {n}" for n in sorted(needles) if n.encode() in data]
    return found


def test_no_file_of_the_run_holds_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RH_TEST_KEY", KEY)
    monkeypatch.setenv("RH_TEST_HEADER_KEY", HEADER_KEY)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        scenario = tmp_path / "s.yaml"
        scenario.write_text(SCENARIO.format(port=server.server_address[1]))
        result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs"))
    finally:
        server.shutdown()
        server.server_close()
    assert result.run_dir is not None and result.exit_code == 0, result
    assert _Echo.count >= 10  # the server answered (and echoed) many requests
    write_reports(run_audit(result.run_dir), result.run_dir, report_table(result.run_dir))
    texts = " ".join(p.read_text(errors="replace") for p in (result.run_dir / "records").glob("*.jsonl"))
    assert "[redacted]" in texts  # the echoes were there, and were cut
    assert _leaks(result.run_dir) == []
