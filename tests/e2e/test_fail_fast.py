"""Fail fast end to end: a wrong model or a dead target stops `rushhour run` within seconds, in the server's
words, invalid and exit 2; `--keep-going` runs on; a flaky but fine run is never stopped.

Real processes on loopback: the CLI, its embedded testbed (which answers an unknown model with vLLM 0.32's
404 text), Locust. Before: a wrong model and a dead target each ran ci-smoke's whole 30 s + drain (43 s)
and exited 0.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from support import rushhour

from rushhour.records.record import read_shard, shard_paths

# the stop-time bar (serial: never beside parallel workers) is the first four tests'; the last two assert no time
pytestmark = pytest.mark.e2e
STOP_WITHIN_S = 15.0  # from the command's start: the bar

SCENARIO = """
name: fail-fast
seed: 3
target:
  url: testbed
  profile: vllm
  model: {model}
  testbed: {{preset: tiny, replicas: 1, config: {{models: [served-model]}}, faults: {faults}}}
  metrics: null
tiers: [{{name: interactive, priority: 10}}]
calibration: {{probes: {probes}, prompt_tokens: [64]}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {{process: constant, rate: 6}}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: 32
    output_tokens: 4
phases: [{{name: main, duration: {duration}}}]
drain_s: 1
"""


def _scenario(tmp_path: Path, model: str = "served-model", probes: int = 3, duration: str = "40s",
              faults: str = "[]") -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO.format(model=model, probes=probes, duration=duration, faults=faults))
    return path


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``rushhour run ARGS``, its output as wide as a CI log's."""
    return rushhour("run", *args, timeout=timeout, columns=250)


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_dir(out: Path) -> Path:
    return next(out.glob("*/run.json")).parent


def _load_requests(run_dir: Path) -> list[dict[str, object]]:
    return [line for path in shard_paths(run_dir) if not path.name.endswith("-calibration.jsonl")
            for line in read_shard(path).lines if line.get("kind") == "request"]


@pytest.mark.parametrize("probes", [3, 0], ids=["calibration", "load"])
def test_a_wrong_model_stops_within_seconds_in_the_servers_words(tmp_path: Path, probes: int) -> None:
    """Caught by the calibration probes, or (without them) by the load's first 10 attempts."""
    out = tmp_path / "runs"
    done = _run(str(_scenario(tmp_path, model="wrong-model", probes=probes)), "--out", str(out))
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())  # one line, however the console wrapped it
    assert "model 'wrong-model' does not exist: served models are served-model" in said, done.stderr
    assert "The model `wrong-model` does not exist. Valid aliases: served-model." in said, done.stderr  # vLLM's text
    run_dir = _run_dir(out)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["stop_reason"] == "aborted_doomed" and manifest["abort"]["kind"] == "doomed"
    assert manifest["abort"]["status"] == 404 and manifest["abort"]["served_models"] == ["served-model"]
    loaded = _load_requests(run_dir)
    if probes:
        assert not loaded, "the load started although every calibration probe failed alike"
        assert manifest["abort"]["at_s"] is None
    else:
        assert len(loaded) >= 10 and {r["status"] for r in loaded if not r.get("cancelled")} == {404}
        assert manifest["abort"]["at_s"] < STOP_WITHIN_S
        assert max(int(r["intended_ns"]) for r in loaded) < STOP_WITHIN_S * 1e9  # type: ignore[call-overload]
    summary = json.loads((run_dir / "summary.json").read_text())  # the records kept are audited
    assert not summary["validity"]["valid"] and summary["exit_code"] == 2
    assert any("does not exist" in reason for reason in summary["validity"]["reasons"])


@pytest.mark.parametrize("probes", [3, 0], ids=["calibration", "load"])
def test_a_dead_target_stops_within_seconds(tmp_path: Path, probes: int) -> None:
    out = tmp_path / "runs"
    scenario = _scenario(tmp_path, probes=probes)
    done = _run(str(scenario), "--target", f"http://127.0.0.1:{_closed_port()}", "--out", str(out),
                "--no-report")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the target refuses connections (ECONNREFUSED" in " ".join(done.stderr.split()), done.stderr
    manifest = json.loads((_run_dir(out) / "run.json").read_text())
    assert manifest["stop_reason"] == "aborted_doomed" and manifest["abort"]["status"] == 0
    loaded = _load_requests(_run_dir(out))
    assert not loaded if probes else max(int(r["intended_ns"]) for r in loaded) < STOP_WITHIN_S * 1e9  # type: ignore[call-overload]
    gate = rushhour("gate", _run_dir(out), timeout=120)
    assert gate.returncode == 2 and "refuses connections" in gate.stdout, gate.stdout + gate.stderr


def test_keep_going_runs_a_doomed_run_to_its_end(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    scenario = _scenario(tmp_path, model="wrong-model", probes=0, duration="4s")
    done = _run(str(scenario), "--out", str(out), "--no-report", "--keep-going")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((_run_dir(out) / "run.json").read_text())
    assert manifest["stop_reason"] == "completed" and "abort" not in manifest
    assert len(_load_requests(_run_dir(out))) >= 20  # 6/s for 4 s, every one 404


def test_a_flaky_but_fine_run_is_not_stopped(tmp_path: Path) -> None:
    """A 500 for 30 % of the first seconds' requests: the first attempts are mixed, so the run goes on."""
    out = tmp_path / "runs"
    faults = "[{kind: error, status: 500, rate: 0.3, at_s: 0, duration_s: 3}]"
    done = _run(str(_scenario(tmp_path, probes=0, duration="6s", faults=faults)), "--out", str(out),
                   "--no-report")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((_run_dir(out) / "run.json").read_text())
    assert manifest["stop_reason"] == "completed", manifest.get("abort")
    first = sorted(_load_requests(_run_dir(out)), key=lambda r: int(r["done_ns"] or 0))[:10]  # type: ignore[call-overload]
    statuses = {r["status"] for r in first}
    assert 500 in statuses and 200 in statuses, statuses  # the case: failures among the first attempts
