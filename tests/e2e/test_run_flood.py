"""`rushhour run` against a server that floods: responses that never end at full speed cannot starve the run.

Seen before the fix: one never-ending 64 KiB-chunk stream kept its greenlet in the read loop; a 6 s
run took 67 s, Locust was SIGKILLed, and the shard kept zero request lines. Now each flood ends at
its cap or deadline, the other requests are served meanwhile, the run stops on time by itself, and
every record is kept.
"""

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
CYCLE = "ok,flood,ok,floodhead,ok,floodevents"

SCENARIO = """
name: flood
seed: 1
target: {{url: "http://127.0.0.1:{port}", profile: vllm, metrics: null}}
tiers: [{{name: t, priority: 5}}]
resilience:
  timeouts: {{connect_s: 1, ttft_s: 2, total_s: 3}}
personas:
  - kind: chat
    name: c
    tier: t
    arrival: {{process: constant, rate: 4}}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: 8
    output_tokens: 4
phases: [{{name: p, duration: 6s}}]
drain_s: 3
"""


def test_flooding_server_cannot_starve_the_run(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, str(FAKES), "--port-file", str(port_file), "--cycle", CYCLE])
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
    assert result.run_dir is not None
    manifest = read_manifest(result.run_dir)
    # Locust stopped by itself at the end of its schedule: not killed, not stopped for overrunning
    assert result.exit_code == 0 and manifest.stop_reason == "completed", manifest.stop_reason
    assert manifest.locust_exit_code in (0, 1)
    records = [r for p in shard_paths(result.run_dir) for r in read_shard(p).lines if r["kind"] == "request"]
    assert len(records) >= 20  # ~24 arrivals; none lost
    errors = [r["error"] for r in records]
    assert "SSE event over 1 MiB" in errors
    assert "response header block over 64 KiB" in errors
    assert any(r["client_timeout"] and r["status"] == 200 and r["tokens"] > 0 for r in records)  # valid flood
    served = [r for r in records if r["status"] == 200 and r["complete"] and not r["error"]]
    assert len(served) >= len(records) // 3  # every "ok" in the cycle was served in spite of the floods
    assert all(r["sent_ns"] is not None and r["done_ns"] is not None for r in records)
