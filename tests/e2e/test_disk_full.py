"""A full disk: one clear line, a final and consistent run.json, and an audit that says what is missing.

The runs folder is a small tmpfs mounted for the test (root only; skipped with the reason otherwise).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from support import rushhour

from rushhour.loadgen.runner import EXIT_DISK_FULL, RunOptions, run_scenario
from rushhour.records.manifest import write_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "loadgen"))
from wire_fakes import FakeServer

pytestmark = pytest.mark.e2e

SCENARIO = """
name: full
target: {{url: "http://127.0.0.1:{port}", profile: openai, model: m, metrics: null}}
tiers: [{{name: t}}]
calibration: {{probes: 0}}
personas:
  - {{kind: chat, name: c, tier: t, arrival: {{process: constant, rate: 40}}, turns: 1,
     system_prompt_tokens: 0, prompt_tokens: 8, output_tokens: 3}}
phases: [{{name: p, duration: {duration}}}]
drain_s: 1
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> None:
    """Write zeros until the device is full."""
    with contextlib.suppress(OSError), (folder / "filler").open("wb") as handle:
        while True:
            handle.write(bytes(64 * 1024))
            handle.flush()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.close()


def test_a_disk_that_fills_mid_run(small_disk: Path, tmp_path: Path, server: FakeServer) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(port=server.port, duration="12s"))
    runs = small_disk / "runs"
    filler = threading.Timer(4.0, _fill, args=(small_disk,))  # the load is running by then
    filler.start()
    text = io.StringIO()
    started = time.monotonic()
    try:
        result = run_scenario(str(scenario), RunOptions(out_dir=runs, live=False),
                              console=Console(file=text, width=300))
    finally:
        filler.cancel()
    said = text.getvalue()
    assert result.stop_reason == "disk_full", said
    assert result.exit_code == EXIT_DISK_FULL
    assert "Traceback" not in said
    assert "is full" in said and "rushhour audit" in said
    run_dir = result.run_dir
    assert run_dir is not None
    manifest = json.loads((run_dir / "run.json").read_text())  # finalised and readable
    assert manifest["stop_reason"] == "disk_full"
    assert manifest["ended_at"] and manifest["disk_full"]["missing"]
    assert manifest["scenario"]["name"] == "full" and manifest["mono_anchor_ns"]
    assert not (run_dir / "run.json.tmp").exists()
    assert not (run_dir / ".reserve").exists()
    assert time.monotonic() - started < 60  # the load stopped when the disk filled (phases: 12 s)
    audit = rushhour("audit", run_dir, columns=300, timeout=180)
    assert "Traceback" not in audit.stderr + audit.stdout
    assert "because the disk was full" in audit.stderr, audit.stderr
    assert audit.returncode != 3, audit.stderr  # not an internal error


def test_a_disk_full_before_the_run_leaves_nothing_behind(small_disk: Path, tmp_path: Path,
                                                         server: FakeServer) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(port=server.port, duration="2s"))
    runs = small_disk / "runs"
    runs.mkdir()
    _fill(small_disk)
    text = io.StringIO()
    result = run_scenario(str(scenario), RunOptions(out_dir=runs, live=False), console=Console(file=text, width=300))
    assert result.stop_reason == "disk_full" and result.exit_code == EXIT_DISK_FULL and result.run_dir is None
    assert "no space left" in text.getvalue() and "Traceback" not in text.getvalue()
    assert list(runs.iterdir()) == []  # no half-made run folder


def test_write_manifest_on_a_full_disk_keeps_the_old_run_json(small_disk: Path) -> None:
    run_dir = small_disk / "r"
    write_manifest(run_dir, {"stop_reason": None, "run_id": "r"})
    _fill(small_disk)
    with pytest.raises(OSError):
        write_manifest(run_dir, {"stop_reason": "completed", "run_id": "r", "pad": "x" * 200_000})
    assert json.loads((run_dir / "run.json").read_text())["run_id"] == "r"
    assert not (run_dir / "run.json.tmp").exists()
