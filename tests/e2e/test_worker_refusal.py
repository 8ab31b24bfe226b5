"""A worker lacking a file the scenario names refuses in one line, and the master reports it and stops.

On loopback (no namespaces needed): the master validates the trace and waits for its worker; the
trace is then removed (as on a worker host that lacks it) and the worker joins. The worker must not
send anything; the master's run ends at once with that worker's one line as the run's error.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from support import cli_command

from rushhour.loadgen import runkey
from rushhour.loadgen.testbed_proc import child_env
from rushhour.records.manifest import read_manifest
from rushhour.records.record import START_FAILED_MARK

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
RUSHHOUR = cli_command()

SCENARIO = """
name: refusal
target:
  url: http://127.0.0.1:9
  profile: vllm
  model: m
  metrics: null
calibration: {probes: 0}
tiers:
  - {name: interactive, priority: 100}
personas:
  - kind: trace_replay
    name: replay
    tier: interactive
    trace: traces/conv.csv
    format: azure
    limit: 20
phases:
  - {name: main, duration: 5s}
drain_s: 1
"""


def test_a_worker_without_the_trace_refuses_and_the_master_says_so(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    trace = tmp_path / "traces" / "conv.csv"
    shutil.copy(REPO / "scenarios" / "traces" / "AzureLLMInferenceTrace_conv.csv", trace)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = child_env({runkey.SECRET_ENV: runkey.new_secret(), runkey.TARGETS_ENV: "http://127.0.0.1:9"})
    out, err = tmp_path / "master.out", tmp_path / "master.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        master = subprocess.Popen([*RUSHHOUR, "run", str(scenario), "--out", str(tmp_path / "runs"), "--no-report",
                                   "--expect-workers", "1", "--master-port", str(port), "--workers-wait", "60"],
                                  cwd=tmp_path, stdout=stdout, stderr=stderr,
                                  env={**env, "PYTHONUNBUFFERED": "1"})
    worker: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 60
        while b"waiting for 1 worker" not in out.read_bytes() + err.read_bytes():
            assert master.poll() is None and time.monotonic() < deadline, out.read_text() + err.read_text()
            time.sleep(0.2)
        trace.unlink()  # the worker's host lacks it
        worker = subprocess.Popen([*RUSHHOUR, "worker", "--master", f"127.0.0.1:{port}", "--spool",
                                   str(tmp_path / "spool")], cwd=tmp_path, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=env)
        code = master.wait(90)
        worker_out = worker.communicate(timeout=60)[0].decode(errors="replace")
    finally:
        for proc in (master, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
    text = out.read_text() + err.read_text()
    assert code == 2, text
    assert "Traceback" not in text and "Traceback" not in worker_out, text + worker_out
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text
    assert f"{START_FAILED_MARK} worker " in errors[0] and "refused to start: FileNotFoundError" in errors[0]
    assert f"personas.0.trace {trace} does not exist on host {socket.gethostname()}" in errors[0], errors[0]
    assert worker.returncode != 0 and START_FAILED_MARK in worker_out, worker_out
    run_dir = next((tmp_path / "runs").iterdir())
    assert read_manifest(run_dir).stop_reason == "startup_error"
    log = [json.loads(line) for line in (run_dir / "workers.jsonl").read_text().splitlines()]
    assert [e["event"] for e in log].count("worker_refused") == 1
    shards = list((run_dir / "records").glob("*.jsonl"))
    assert not any('"kind":"request"' in p.read_text() for p in shards)
