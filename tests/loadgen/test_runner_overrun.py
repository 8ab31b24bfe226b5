"""A Locust process that does not stop at the run's end is killed, and the run says exactly that.

Seen before the fix: a stuck Locust was SIGKILLed 55 s after the end, and the runner printed "Locust
failed to start (exit -9)" while run.json said ``stop_reason: completed``. The stand-in here is a
real child process that ignores SIGTERM, as a Locust whose loop never yields does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from rushhour.audit.summary import Validity
from rushhour.audit.validity import with_early_quits
from rushhour.loadgen import runner
from rushhour.loadgen.process_exit import EXIT_LOAD_LOST, cut_shares, lost_shards
from rushhour.records.manifest import read_manifest

SCENARIO = """
name: overrun
seed: 1
target: {url: "http://127.0.0.1:9", profile: vllm, metrics: null}
tiers: [{name: t, priority: 5}]
personas:
  - kind: chat
    name: c
    tier: t
    arrival: {process: constant, rate: 1}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: 8
    output_tokens: 4
phases: [{name: p, duration: 1s}]
drain_s: 0
"""
STUCK = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
POLITE = "import time; time.sleep(600)"  # dies on SIGTERM
KILLED = "import os, signal, time; time.sleep(0.3); os.kill(os.getpid(), signal.SIGKILL)"  # as the OOM killer does


class _Console:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.is_terminal = False

    def print(self, text: Any, **_: Any) -> None:
        self.lines.append(str(text))


# the stand-in takes the anchor at its start, as Locust's master does when its test starts (loadgen/ship.py)
ANCHOR = ("import sys, time; from rushhour.loadgen.ship import write_anchor; "
          "write_anchor(sys.argv[1], time.monotonic_ns(), time.time_ns()); ")


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> tuple[runner.RunResult, _Console]:
    monkeypatch.setattr(runner, "locust_command",
                        lambda options, run_dir, *a, **k: [sys.executable, "-c", ANCHOR + code, str(run_dir)])
    monkeypatch.setattr(runner, "OVERRUN_MARGIN_S", 1.0)
    monkeypatch.setattr(runner, "STOP_GRACE_S", 1.0)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    console = _Console()
    # nothing listens on the target: --keep-going, or its refused calibration probe would stop the run (fail fast)
    options = runner.RunOptions(out_dir=tmp_path / "runs", keep_going=True)
    result = runner.run_scenario(str(scenario), options, console=console)
    return result, console


def test_stuck_locust_is_reported_as_killed_for_overrunning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, console = _run(tmp_path, monkeypatch, STUCK)
    assert result.run_dir is not None and result.stop_reason == "overrun_killed"
    assert result.exit_code == EXIT_LOAD_LOST  # not 130: nobody pressed Ctrl-C
    manifest = read_manifest(result.run_dir)
    assert manifest.stop_reason == "overrun_killed" and manifest.locust_exit_code == -9
    assert manifest.overrun_killed_after_end_s >= 1.0
    text = "\n".join(console.lines)
    assert "after the run's end; killed (SIGKILL)" in text and "Locust did not stop within" in text
    assert "failed to start" not in text


def test_locust_stopped_by_sigterm_after_overrunning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, console = _run(tmp_path, monkeypatch, POLITE)
    assert result.run_dir is not None and result.stop_reason == "overrun_stopped"
    assert read_manifest(result.run_dir).stop_reason == "overrun_stopped"
    assert any("stopped (SIGTERM)" in line for line in console.lines)
    assert not any("failed to start" in line for line in console.lines)
    assert result.exit_code == EXIT_LOAD_LOST


def test_a_killed_load_process_is_named_with_its_signal_not_taken_for_ctrl_c(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, console = _run(tmp_path, monkeypatch, KILLED)
    assert result.run_dir is not None and result.stop_reason == "load_killed"
    assert result.exit_code == EXIT_LOAD_LOST != runner.EXIT_INTERRUPTED
    manifest = read_manifest(result.run_dir)
    assert manifest.stop_reason == "load_killed" and manifest.locust_exit_code == -9
    assert manifest.error is not None and f"(PID {manifest.locust_pid}) was killed by SIGKILL" in manifest.error
    text = "\n".join(console.lines)
    assert "was killed by SIGKILL" in text and "dmesg" in text and "failed to start" not in text


def test_lost_shards_are_the_processes_that_started_and_never_stopped() -> None:
    events = [{"name": "worker_start", "shard": "h-1"}, {"name": "worker_start", "shard": "h-2"},
              {"name": "worker_stop", "shard": "h-1"}, {"name": "worker_start", "shard": "h-3-calibration"}]
    assert lost_shards(events) == ["h-2"]
    assert lost_shards([*events, {"name": "worker_stop", "shard": "h-2"}]) == []


def test_shares_cut_under_a_running_run_make_it_invalid() -> None:
    """Locust's master stopped the test under its processes (workers that missed heartbeats): their
    ``worker_stop`` says interrupted while the run went on. The runner names them ``worker_quit``, and the
    audit never takes what they did not send for a completed run."""
    events = [{"name": "worker_stop", "shard": "h-1", "detail": {"reason": "completed"}},
              {"name": "worker_stop", "shard": "h-2", "detail": {"reason": "interrupted"}},
              {"name": "worker_stop", "shard": "h-3-calibration", "detail": {"reason": "interrupted"}},
              {"name": "worker_stop", "shard": "h-4", "detail": {"reason": "budget"}}]
    assert cut_shares(events) == ["h-2"]
    valid = Validity(valid=True, reasons=[], loop_lag_p99_ms=None, cpu_max_percent=None, not_sent=0,
                     schedule_lag_p99_ms=None, skipped_lines=0, truncated_shards=0)
    assert with_early_quits(valid, None, "completed").valid
    cut = with_early_quits(valid, None, "worker_quit", "1 load process(es) stopped before their share ended (h-2)")
    assert not cut.valid and "h-2" in cut.reasons[-1] and "never sent" in cut.reasons[-1]
