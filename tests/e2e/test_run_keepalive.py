"""`rushhour run` against a real uvicorn server whose keep-alive is shorter than the chat think time.

Before the fix, every turn after a think time longer than uvicorn's keep-alive went into a connection
the server had closed and was recorded as a ``transport`` error (16–25 per run against real vLLM and
LiteLLM) for requests the server never saw. Now: zero transport errors, and the server saw each
recorded request exactly once.
"""

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

from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.manifest import read_manifest
from rushhour.records.record import read_shard, shard_paths

pytestmark = pytest.mark.e2e
APP = Path(__file__).resolve().parents[1] / "loadgen" / "uvicorn_sse.py"

# keepalive_s stays at its default (4 s), above uvicorn's 1 s here: the resend path has to do the work
SCENARIO = """
name: keepalive
seed: 1
target: {{url: "http://127.0.0.1:{port}", profile: vllm, metrics: null}}
tiers: [{{name: t, priority: 5}}]
resilience:
  timeouts: {{connect_s: 2, ttft_s: 5, total_s: 5}}
personas:
  - kind: chat
    name: c
    tier: t
    arrival: {{process: constant, rate: 0.5}}
    turns: 3
    think_time_s: 3   # 2 s past uvicorn's 1 s: its close timer fires late on a loaded machine (at 1.5 s no
                      # turn met a closed connection once, beside parallel workers)
    system_prompt_tokens: 0
    prompt_tokens: 8
    output_tokens: 4
phases: [{{name: p, duration: 12s}}]   # not 3 s: a loaded machine started the worker after all of it
drain_s: 15
"""


def test_turns_after_an_idle_gap_are_never_transport_errors(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, str(APP), "--port-file", str(port_file), "--keep-alive", "1"],
                              stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        port = int(port_file.read_text())
        scenario = tmp_path / "s.yaml"
        scenario.write_text(SCENARIO.format(port=port))
        result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs"))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/seen", timeout=10) as resp:
            seen: dict[str, int] = json.loads(resp.read())
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    assert result.exit_code == 0 and result.run_dir is not None
    assert read_manifest(result.run_dir).stop_reason == "completed"
    records = [r for p in shard_paths(result.run_dir) for r in read_shard(p).lines if r["kind"] == "request"]
    sent = [r for r in records if not r["not_sent"]]
    turns = [r for r in sent if r["persona"] != "calibration"]  # the chat turns, not the idle probes before them
    assert len(turns) >= 6, len(turns)  # ~6 sessions × 3 turns, 2 of them after an idle gap
    assert not [r for r in sent if r["transport_error"]], [r["error"] for r in sent if r["transport_error"]]
    assert all(r["status"] == 200 and r["complete"] for r in sent)
    assert any(r["reconnected"] for r in turns)  # the idle gaps did meet closed connections
    assert {r["request_id"]: 1 for r in sent} == seen  # each recorded request reached the server once
