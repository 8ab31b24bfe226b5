"""Calibration against a target that never answers: one probe on a short deadline, and Ctrl-C is clean."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from support import cli_command, cli_env

from rushhour.loadgen.probes import PROBE_TTFT_S
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.manifest import read_manifest
from rushhour.records.record import read_shard, shard_paths

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]

# ttft_s/total_s as slow as a flex tier's: before the fix each probe waited them out (3 × 60 s here)
SCENARIO = """
name: stuck-calibration
seed: 1
target: {{url: "http://127.0.0.1:{port}", profile: vllm, metrics: null}}
tiers: [{{name: t, priority: 5}}]
resilience:
  timeouts: {{connect_s: 1, ttft_s: 60, total_s: 120}}
calibration: {{probes: 3, prompt_tokens: [64]}}
personas:
  - kind: chat
    name: c
    tier: t
    arrival: {{process: constant, rate: 2}}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: 8
    output_tokens: 4
phases: [{{name: p, duration: 5s}}]
drain_s: 1
"""


class HangingServer:
    """Accepts connections on 127.0.0.1, reads what comes, never answers; lives at most ``lifetime_s``."""

    def __init__(self, lifetime_s: float = 120.0) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._deadline = time.monotonic() + lifetime_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self._conns.append(conn)  # held open, never answered

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def hanging() -> Iterator[HangingServer]:
    server = HangingServer()
    try:
        yield server
    finally:
        server.close()


def _calibration_records(run_dir: Path) -> list[dict]:
    return [
        r
        for p in shard_paths(run_dir)
        if p.name.endswith("-calibration.jsonl")
        for r in read_shard(p).lines
        if r["kind"] == "request"
    ]


def test_calibration_gives_up_after_one_timed_out_probe(tmp_path: Path, hanging: HangingServer) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(port=hanging.port))
    started = time.monotonic()
    result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs"))
    took = time.monotonic() - started
    assert result.exit_code == 0 and result.run_dir is not None
    manifest = read_manifest(result.run_dir)
    assert manifest.stop_reason == "completed"
    cal = manifest.calibration
    assert cal["sent"] == 1 and cal["served"] == 0 and cal["probes"] == 3
    assert "timed out" in cal["gave_up"]
    assert cal["seconds"] < PROBE_TTFT_S + 30  # one short probe (+ a slow child start), not 3 × ttft_s (180 s)
    probes = _calibration_records(result.run_dir)
    assert len(probes) == 1 and probes[0]["client_timeout"] and probes[0]["persona"] == "calibration"
    assert took < 90, f"the whole 5 s run took {took:.1f} s"  # the stuck probe alone used to take 180 s


def _wait_for(predicate, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_sigint_during_calibration(tmp_path: Path, hanging: HangingServer) -> None:
    scenario = tmp_path / "s.yaml"
    # a long probe deadline is capped at PROBE_TTFT_S anyway: interrupt well inside it
    scenario.write_text(SCENARIO.format(port=hanging.port))
    runs = tmp_path / "runs"
    env = cli_env()
    proc = subprocess.Popen(
        [*cli_command(), "run", str(scenario), "--out", str(runs), "--no-report"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:

        def probe_in_flight() -> bool:
            dirs = list(runs.glob("*/run.json"))
            if not dirs or hanging.accepted < 1:
                return False
            return "pid" in json.loads(dirs[0].read_text()).get("calibration", {})

        assert _wait_for(probe_in_flight, 30), "calibration never started"
        run_dir = next(runs.glob("*/run.json")).parent
        cal_pid = read_manifest(run_dir).calibration["pid"]
        children = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        assert cal_pid in children
        time.sleep(0.3)  # let the probe's record be under way
        sent_at = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert time.monotonic() - sent_at < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    text = out.decode()
    assert proc.returncode == 130, text
    assert "interrupted during calibration; partial run in" in text
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == "interrupted" and manifest.ended_at
    assert manifest.interrupted_during == "calibration"
    assert manifest.calibration["interrupted"] is True
    probes = _calibration_records(run_dir)
    assert len(probes) == 1 and probes[0]["cancelled"]  # the probe in flight was recorded
    for pid in children | {cal_pid}:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
