"""`rushhour run` off a terminal (a CI log) prints a progress line every ~5 s, not only "load running …"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import rushhour, write_scenario

from rushhour.loadgen.live import ShardTail, progress_line


def _request(tier: str, status: int, i: int) -> str:
    return json.dumps({"kind": "request", "tier": tier, "status": status, "complete": status == 200,
                       "sent_ns": i, "first_token_ns": i + 5_000_000}) + "\n"


def test_progress_line_per_tier(tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    lines = [_request("interactive", 200, i) for i in range(4)]
    lines += [_request("batch", 200, 1), _request("batch", 429, 2), _request("batch", 503, 3),
              _request("batch", 500, 4), _request("batch", 0, 5)]  # 0: no HTTP answer (a client timeout)
    lines.append(json.dumps({"kind": "health", "in_flight": 3, "loop_lag_ns": 0, "cpu_percent": 1.0}) + "\n")
    (records / "h-1.jsonl").write_text("".join(lines))
    tail = ShardTail(tmp_path)
    assert progress_line(tail, 0, 60) == "load 0/60 s · no request finished yet"
    tail.poll()
    assert progress_line(tail, 15.2, 65) == (
        "load 15/65 s, 3 in flight · batch: 5 sent, 1 served, 4 not served (429 1, 503 1, no answer 1, other 1) · "
        "interactive: 4 sent, 4 served, 0 not served")


@pytest.mark.e2e
def test_run_in_a_ci_log_prints_progress(tmp_path: Path) -> None:
    """A real 14 s run against the testbed, output piped: progress lines with growing counts."""
    path = write_scenario(tmp_path, seconds=14)
    res = rushhour("run", str(path), "--out", str(tmp_path / "runs"), "--no-report")
    assert res.returncode == 0, res.stderr
    progress = [line for line in res.stderr.splitlines() if line.startswith("load ") and "/17 s" in line]
    assert len(progress) >= 2, res.stderr
    sent = [int(line.split("interactive: ")[1].split(" sent")[0]) for line in progress if "interactive: " in line]
    assert sent and sent == sorted(sent) and sent[-1] > 0, progress
    assert all(len(line) < 400 for line in progress)
