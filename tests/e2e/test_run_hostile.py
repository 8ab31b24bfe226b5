"""`rushhour run` against a hostile server: every bad answer becomes a record with the right facts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.manifest import read_manifest
from rushhour.records.record import read_shard, shard_paths

pytestmark = pytest.mark.e2e
FAKES = Path(__file__).resolve().parents[1] / "loadgen" / "wire_fakes.py"

SCENARIO = """
name: hostile
seed: 1
target: {{url: "http://127.0.0.1:{port}", profile: vllm, metrics: null}}
tiers: [{{name: t, priority: 5}}]
resilience:
  timeouts: {{connect_s: 1, ttft_s: 1, total_s: 2}}
personas:
  - kind: chat
    name: c
    tier: t
    arrival: {{process: constant, rate: 9}}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: 8
    output_tokens: 4
phases: [{{name: p, duration: 3s}}]
drain_s: 2
"""


def test_hostile_server(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, str(FAKES), "--port-file", str(port_file)])
    try:
        deadline = time.monotonic() + 60  # a Python start on a loaded CI machine
        while not port_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        scenario = tmp_path / "s.yaml"
        scenario.write_text(SCENARIO.format(port=port_file.read_text().strip()))
        result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs"))
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    assert result.exit_code == 0 and result.run_dir is not None
    assert read_manifest(result.run_dir).stop_reason == "completed"
    records = [r for p in shard_paths(result.run_dir) for r in read_shard(p).lines if r["kind"] == "request"]
    assert len(records) >= 20  # the run went on through every failure

    def some(pred) -> bool:  # type: ignore[no-untyped-def]
        return any(pred(r) for r in records)

    assert some(lambda r: r["status"] == 200 and r["complete"] and r["tokens"] == 3 and not r["error"])
    assert some(lambda r: r["status"] == 200 and r["in_band_error"] and r["reason"] == "SERVICE_UNAVAILABLE")
    assert some(lambda r: r["status"] == 200 and "malformed" in (r["error"] or ""))
    assert some(lambda r: r["status"] == 200 and not r["complete"] and "Bad Gateway" in (r["error"] or ""))
    assert some(lambda r: r["status"] == 429 and r["retry_after_s"] == 1.5 and r["reason"] == "rate_limit_exceeded")
    assert some(lambda r: r["status"] == 200 and not r["complete"] and r["tokens"] == 1)  # truncated / reset
    assert some(lambda r: r["client_timeout"] and r["status"] == 0)
    assert some(lambda r: r["transport_error"] and "malformed HTTP" in (r["error"] or ""))
    assert all(r["sent_ns"] is not None and r["done_ns"] is not None for r in records)
    assert all(len(r["error"] or "") <= 300 for r in records)
