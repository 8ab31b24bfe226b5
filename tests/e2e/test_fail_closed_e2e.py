"""Fail closed end to end (issue 12): a target killed mid-run, and a server whose every answer no rule knows.

Real processes on loopback: `rushhour run` with its embedded testbed (killed by PID), a hostile HTTP
server, then `rushhour gate` and `rushhour report` as a CI job would call them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import REPO, cli_command, cli_env, rushhour

from rushhour.audit import run_audit
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.manifest import read_manifest

pytestmark = pytest.mark.e2e


def _wait_for(predicate, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _load_started(out: Path) -> bool:
    shards = [p for p in out.glob("*/records/*.jsonl") if not p.name.endswith("-calibration.jsonl")]
    return any(b'"kind":"request"' in p.read_bytes() for p in shards)


def test_ci_smoke_with_the_target_killed_fails_the_gate(tmp_path: Path) -> None:
    """Before: 72 of 73 requests failed, `gate --judge point` exited 0 and said interactive was never dropped."""
    out = tmp_path / "runs"
    proc = subprocess.Popen([*cli_command(), "run", "ci-smoke", "--no-report", "--out", str(out)], cwd=REPO,
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert _wait_for(lambda: _load_started(out), 90), "the load never started"
        time.sleep(5)  # ~5 s into the load, as in the review
        run_dir = next(p.parent for p in out.glob("*/run.json"))
        os.kill(read_manifest(run_dir).testbed_pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode is not None, output
    gate = rushhour("gate", str(run_dir), "--judge", "point")
    assert gate.returncode in (1, 2), gate.stdout + gate.stderr
    assert "target unreachable" in gate.stdout
    report = rushhour("report", str(run_dir))
    assert report.returncode == 0, report.stdout + report.stderr
    for name in ("report.md", "report.html"):
        text = (run_dir / name).read_text()
        assert "never dropped" not in text, name
        assert "not served" in text, name
    summary = json.loads((run_dir / "summary.json").read_text())
    inter = next(t for t in summary["tiers"] if t["name"] == "interactive")
    assert inter["unserved"] > inter["by_class"]["served"], inter["by_class"]
    assert summary["exit_code"] in (1, 2) and not summary["passed"]


UNKNOWN = b'{"error":{"message":"Backend pool exhausted, come back later (ref 42)","type":"Unavailable","code":503}}'


class _Busy(BaseHTTPRequestHandler):
    """Answers every request with a 503 whose text no rule of any profile knows."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(503)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(UNKNOWN)))
        self.end_headers()
        self.wfile.write(UNKNOWN)

    def log_message(self, *args: object) -> None:
        pass


SCENARIO = """
name: busy
seed: 2
target: {{url: "http://127.0.0.1:{port}", profile: vllm, metrics: null}}
tiers: [{{name: t, priority: 5, slo: {{max_drop_rate: 0.1}}}}]
personas:
  - {{kind: chat, name: c, tier: t, arrival: {{process: constant, rate: 6}}, turns: 1, system_prompt_tokens: 0,
     prompt_tokens: 8, output_tokens: 4}}
phases: [{{name: p, duration: 3s}}]
drain_s: 1
calibration: {{probes: 0}}
"""


def test_every_answer_unknown_is_not_served_and_named(tmp_path: Path) -> None:
    """Before: a tier that served 0 of 15 passed at 0 % dropped against a hostile server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        scenario = tmp_path / "s.yaml"
        scenario.write_text(SCENARIO.format(port=server.server_address[1]))
        result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs"))
    finally:
        server.shutdown()
        server.server_close()
    assert result.run_dir is not None
    summary = run_audit(result.run_dir)
    tier = summary.tier("t")
    assert tier.requests >= 10 and tier.by_class["unclassified"] == tier.requests
    assert tier.drop_rate.value == 1.0 and tier.unserved == tier.requests
    finding = next(f for f in summary.findings if f.kind == "unclassified")
    assert finding.severity == "error"
    assert finding.message.startswith(f"{tier.requests} × 503 "), finding.message
    assert "Backend pool exhausted" in finding.message
    assert "no rule for profile vllm" in finding.message
    verdict = next(v for v in summary.verdicts if v.check == "max_drop_rate")
    assert not verdict.passed and verdict.observed == 1.0
    gate = rushhour("gate", str(result.run_dir), "--judge", "point")
    # 1 (fail); 2 only when a busy machine also made the generator lag (validity): never a pass
    assert gate.returncode in (1, 2), gate.stdout + gate.stderr
    assert "Backend pool exhausted" in gate.stdout and "no rule for profile vllm" in gate.stdout
