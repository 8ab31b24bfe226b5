"""Validity by harm on real runs: the Locust process stopped (SIGSTOP) at chosen moments of its schedule.

One request every 2 s against a slow testbed (first token ~0.77 s after the send, then a token every ~0.28 s):

* stopped while each request waits for its first token, and past it: the kernel stamps the first token's
  bytes while the process is stopped and the next token comes after it resumes, so no time moves — the run
  is valid, with a warning naming the stalled process (the old rule voided it: loop lag in every other
  busy second). The ledger confirms each first token to the millisecond.
* stopped across each send: the sends leave ~0.4 s late — invalid, the cause and a remedy named.
* stopped across the first three tokens: the first read holds three tokens, its kernel stamp is the third's —
  invalid for moved first tokens (the ledger confirms they are late).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rushhour.audit import run_audit
from rushhour.audit.ledger import LEDGER_FILE
from rushhour.audit.load import load_run
from rushhour.audit.validity import check_validity
from rushhour.loadgen.runner import RunOptions, RunResult, run_scenario
from rushhour.records.manifest import read_manifest

# serial: the verdicts rest on stops placed within ~0.1 s of the schedule, which parallel workers would blur
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

PERIOD_S = 2.0
SCENARIO = """
name: stall-step
seed: 3
target:
  url: testbed
  profile: llm-d
  model: testbed
  testbed: {preset: tiny, replicas: 1, speed: 0.008}
tiers:
  - {name: high, priority: 100, slo: {ttft_ms: {p99: 5000}}}
personas:
  - kind: chat
    name: c
    tier: high
    arrival: {process: constant, rate: 0.5}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: constant, value: 400}
    output_tokens: {dist: constant, value: 4}
phases: [{name: step, duration: 11s}]
calibration: {probes: 0}
drain_s: 3
"""


def _run(tmp_path: Path, window: tuple[float, float]) -> tuple[RunResult, int]:
    """The run, its Locust process stopped from ``window[0]`` to ``window[1]`` s after each send (2, 4, … s)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    out: list[RunResult] = []
    runner = threading.Thread(target=lambda: out.append(run_scenario(str(scenario), RunOptions(
        out_dir=tmp_path / "runs", live=False))))
    runner.start()
    pid = _stop_around_sends(tmp_path / "runs", runner, window)
    runner.join(timeout=180)
    assert out, "the run did not end"
    return out[0], pid


def _stop_around_sends(runs: Path, runner: threading.Thread, window: tuple[float, float]) -> int:
    deadline = time.monotonic() + 60
    pid = anchor = None
    while (pid is None or anchor is None) and runner.is_alive() and time.monotonic() < deadline:
        for run_dir in runs.glob("*/"):
            with contextlib.suppress(Exception):
                manifest = read_manifest(run_dir)
                pid, anchor = manifest.locust_pid, manifest.mono_anchor_ns
        time.sleep(0.05)
    assert pid and anchor, "the load process or its anchor never appeared"
    try:
        for k in range(1, 6):  # sends at 2, 4, 6, 8, 10 s
            start = anchor + int((k * PERIOD_S + window[0]) * 1e9)
            time.sleep(max(0.0, (start - time.monotonic_ns()) / 1e9))
            os.kill(pid, signal.SIGSTOP)
            time.sleep(window[1] - window[0])
            os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    return pid


def _first_token_errors_ms(run_dir: Path) -> list[float]:
    """Client first-token time minus the testbed ledger's, per request (both CLOCK_MONOTONIC)."""
    data = load_run(run_dir)
    anchor = data.manifest.mono_anchor_ns or 0
    ledger = {}
    for line in (run_dir / LEDGER_FILE).read_text().splitlines():
        row = json.loads(line)
        ledger[row["request_id"]] = row
    out = []
    for rid, first in zip(data.requests["request_id"].astype(str), data.requests["first_token_ns"], strict=True):
        row = ledger.get(rid)
        if row and row.get("first_token_ns") is not None and first == first:
            out.append((first - (row["first_token_ns"] - anchor)) / 1e6)
    return out


def test_a_stall_that_moved_no_time_warns_and_stays_valid(tmp_path: Path) -> None:
    result, pid = _run(tmp_path, (0.3, 0.9))  # the first token (~0.77 s) comes while stopped, the next after
    assert result.run_dir is not None
    validity = run_audit(result.run_dir).validity
    errors = _first_token_errors_ms(result.run_dir)
    assert len(errors) >= 4 and max(errors) < 5.0, errors  # the kernel's stamps: the stall moved nothing
    assert validity.valid, validity.reasons
    assert validity.timing_judged_by == "harm" and validity.first_tokens_moved == 0
    assert validity.warnings and validity.warnings[0].startswith("generator loop lag"), validity
    assert "moved no send or first-token time" in validity.warnings[0]
    assert validity.lagging_process == f"the Locust process (pid {pid})"
    assert validity.cause and "embedded testbed runs on the same cores" in validity.cause
    # the same records judged by the symptom (as records without the first-token facts are): void
    data = load_run(result.run_dir)
    attempts = data.requests.drop(columns=["first_token_clock"])
    attempts["schedule_lag_ns"] = attempts["sent_ns"] - attempts["intended_ns"]
    old = check_validity(attempts, data.health, skipped_lines=0, truncated_shards=0)
    assert not old.valid and old.reasons[0].startswith("generator loop lag"), old.reasons


def test_a_stall_across_the_sends_is_invalid_and_named(tmp_path: Path) -> None:
    result, pid = _run(tmp_path, (-0.3, 0.4))  # every send falls in a stop: it leaves ~0.4 s late
    assert result.run_dir is not None
    summary = run_audit(result.run_dir)
    validity = summary.validity
    assert not validity.valid
    assert any("after their intended time" in r for r in validity.reasons), validity.reasons
    assert validity.lagging_process == f"the Locust process (pid {pid})"
    assert validity.cause and f"pid {pid}" in validity.cause and "host load average" in validity.cause
    assert validity.remedies and any("testbed on another host" in r for r in validity.remedies)
    invalid = next(f for f in summary.findings if f.kind == "invalid")
    assert "Remedy:" in invalid.message


def test_a_stall_over_the_first_tokens_is_invalid(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, (0.6, 1.5))  # the first three tokens (~0.77, 1.05, 1.33 s) come in one stop
    assert result.run_dir is not None
    validity = run_audit(result.run_dir).validity
    errors = _first_token_errors_ms(result.run_dir)
    assert sum(e > 10.0 for e in errors) >= 3, errors  # the ledger: the first read's stamp is a later token's
    assert not validity.valid
    assert any("first token(s) stamped more than 10 ms late" in r for r in validity.reasons), validity.reasons
