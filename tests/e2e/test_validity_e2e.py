"""Validity judges sustained generator trouble, not one transient: a short low-load testbed run is valid,
and the same run with its Locust process really starved (SIGSTOP/SIGCONT by PID) is invalid.

Seen before the fix: a 15 s sweep step at 1.2 req/s came out invalid, "generator loop lag p99 131 ms
> 50 ms", from one health sample (151 ms at t = 0.7 s: the prompt base built lazily on the first
arrival) among 22.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rushhour.audit import run_audit
from rushhour.loadgen.runner import RunOptions, RunResult, run_scenario
from rushhour.records.manifest import read_manifest

# serial: both verdicts rest on the generator's loop lag, which parallel test workers would add to
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

SCENARIO = """
name: short-step
seed: 5
target:
  url: testbed
  profile: llm-d
  model: testbed
  testbed: {preset: tiny, replicas: 1, speed: 0.25}
tiers:
  - {name: high, priority: 100, slo: {ttft_ms: {p99: 5000}}}
personas:
  - kind: chat
    name: c
    tier: high
    arrival: {process: constant, rate: 1.2}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: lognormal, median: 200, sigma: 0.5, min: 16, max: 800}
    output_tokens: {dist: lognormal, median: 30, sigma: 0.5, min: 4, max: 80}
phases: [{name: step, duration: DURATION}]
calibration: {probes: 0}
drain_s: 3
"""


def _run(tmp_path: Path, duration: str, starve: bool) -> RunResult:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("DURATION", duration))
    out: list[RunResult] = []
    runner = threading.Thread(target=lambda: out.append(run_scenario(str(scenario), RunOptions(
        out_dir=tmp_path / "runs", live=False))))
    runner.start()
    if starve:
        _starve(tmp_path / "runs", runner)
    runner.join(timeout=180)
    assert out, "the run did not end"
    return out[0]


def _starve(runs: Path, runner: threading.Thread) -> None:
    """Once the load process runs its schedule, stop it 0.5 s of every 0.7 s for 10 s: a starved generator."""
    deadline = time.monotonic() + 60
    pid = None
    while pid is None and runner.is_alive() and time.monotonic() < deadline:
        for run_dir in runs.glob("*/"):
            with contextlib.suppress(Exception):
                manifest = read_manifest(run_dir)
                if manifest.locust_pid and list((run_dir / "records").glob("*.jsonl")):
                    pid = manifest.locust_pid
        time.sleep(0.2)
    assert pid is not None, "the load process never started"
    time.sleep(4.0)  # past the anchor (3 s lead), with requests in flight
    end = time.monotonic() + 10.0
    try:
        while time.monotonic() < end and runner.is_alive():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.5)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.2)
    except ProcessLookupError:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_short_low_load_step_is_valid(tmp_path: Path) -> None:
    result = _run(tmp_path, "15s", starve=False)
    assert result.run_dir is not None and result.exit_code == 0
    validity = run_audit(result.run_dir).validity
    assert validity.valid, validity.reasons
    assert validity.delayed_requests < 3


def test_starved_generator_is_invalid(tmp_path: Path) -> None:
    result = _run(tmp_path, "20s", starve=True)
    assert result.run_dir is not None
    validity = run_audit(result.run_dir).validity
    assert not validity.valid, validity
    # every send due while the process was stopped left late: the schedule-lag rule always sees the starvation
    delayed = next((r for r in validity.reasons if "after their intended time" in r), str(validity.reasons))
    assert validity.delayed_requests >= 3 and "the generator fell behind" in delayed, validity.reasons
    # the loop-lag rule needs three lagging seconds with requests in flight (a second with nothing in flight
    # distorted nothing): at 1.2 req/s the stops do not always give that (1 of 4 suite runs on 1 Dec 2026: the
    # schedule-lag reason alone), so its wording is checked when it fired; tests/audit/test_validity_sustained.py
    # holds the rule itself
    lag = [r for r in validity.reasons if r.startswith("generator loop lag")]
    if lag:
        assert "in a row" in lag[0] and "busy second" in lag[0], lag
