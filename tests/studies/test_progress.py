"""Sweep and study steps say how they are doing every few seconds (a CI log is never silent for long)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support import rushhour

from rushhour.progress import StepWatch


def _request(i: int, status: int = 200) -> str:
    return json.dumps({"kind": "request", "tier": "interactive", "status": status, "complete": True,
                       "sent_ns": i, "first_token_ns": i + 5_000_000}) + "\n"


def test_step_watch_counts_the_requests_done(tmp_path: Path) -> None:
    lines: list[str] = []
    with StepWatch(tmp_path, "step 1/3 (1×)", lines.append, interval_s=0.1) as watch:
        deadline = time.monotonic() + 60
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "starting …" in lines[0]  # no run folder yet: testbed and calibration
        records = tmp_path / "20260101T000000Z-abcd" / "records"
        records.mkdir(parents=True)
        with (records / "host-1.jsonl").open("w") as handle:
            handle.write('{"kind": "header"}\n' + "".join(_request(i) for i in range(7)) + _request(8, 429))
        assert watch.line().endswith("8 requests done (7 served)")
        with (records / "host-1.jsonl").open("a") as handle:
            handle.write(_request(9))
        assert watch.line().endswith("9 requests done (8 served)")
        assert watch.line().startswith("  step 1/3 (1×): ")
    count = len(lines)
    time.sleep(0.3)
    assert len(lines) == count, "the watcher kept talking after the step"


@pytest.mark.e2e
def test_a_sweep_step_prints_progress_lines(tmp_path: Path) -> None:
    """A real 12 s step against the testbed, stdout/stderr piped as in CI: progress lines inside the step."""
    res = rushhour("sweep", "sweep-tiers", "--scale", "1", "--step-duration", "12s", "--warmup", "0", "--out", tmp_path,
                   columns=None, timeout=600)
    assert res.returncode == 0, res.stderr
    progress = [line for line in res.stderr.splitlines() if line.startswith("  step 1/1 (1×): ") and " s, " in line]
    assert progress, res.stderr
    done = [line for line in progress if "requests done" in line]
    assert done, progress
    counts = [int(line.split(" s, ")[1].split(" requests")[0].replace(",", "")) for line in done]
    assert counts == sorted(counts) and counts[-1] > 0
