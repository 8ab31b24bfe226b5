"""One breaker per route across `--processes 2`: a process that opens it tells the master, the other follows.

The primary testbed's only replica is down from 2 s to 12 s (requests hang, the client times out);
each process drives half of the chat load. Whichever process trips first opens the route for both:
the other's shard has an ``open`` line whose cause names the first one, and the master's
``breakers-master.jsonl`` holds the run's own changes with their times. The audit's timeline shows
the route opening once at the first process's time, not once per process.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from rushhour.audit import run_audit
from rushhour.loadgen.breaker import SHARED
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.record import read_shard, shard_paths
from tests.e2e.test_resilience_e2e import FALLBACK_SCENARIO

pytestmark = pytest.mark.e2e


def test_the_breaker_opens_for_every_process_at_once(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(FALLBACK_SCENARIO)
    result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs", processes=2, live=False))
    assert result.exit_code == 0 and result.run_dir is not None, result
    run_dir = result.run_dir
    shards = [p for p in shard_paths(run_dir) if not p.name.endswith("-calibration.jsonl")]
    assert len(shards) == 2
    lines = {p.stem: [r for r in read_shard(p).lines if r["kind"] == "breaker" and r["route"] == "primary"]
             for p in shards}
    opens = {name: [r for r in rows if r["state"] == "open"] for name, rows in lines.items()}
    assert all(opens.values()), lines  # both processes' breakers opened
    shared = [r for rows in opens.values() for r in rows if (r["cause"] or "").startswith(SHARED)]
    assert shared, opens  # at least once, one of them opened because the other said so
    names = set(lines)
    assert all(any(f"on {n}" in r["cause"] for n in names) for r in shared)
    log = [json.loads(line) for line in (run_dir / "breakers-master.jsonl").read_text().splitlines()]
    assert log and log[0]["state"] == "open" and log[0]["route"] == "primary"
    assert {e["who"] for e in log} <= names
    # the follower opened within a moment of the opener (one message through the master)
    first = min(r["ts_ns"] for rows in opens.values() for r in rows)
    follower_first = max(min(r["ts_ns"] for r in rows) for rows in opens.values())
    assert (follower_first - first) / 1e9 < 1.5, (first, follower_first)
    summary = run_audit(run_dir)
    timeline = [c for c in summary.timeline.breaker if c["route"] == "primary"]
    assert timeline[0]["state"] == "open" and abs(timeline[0]["t_s"] - first / 1e9) < 1e-6
    assert all(a["state"] != b["state"] for a, b in pairwise(timeline)), timeline
    print(f"\nshared breaker: first open {first / 1e9:.2f} s, the other process {follower_first / 1e9:.2f} s "
          f"(+{(follower_first - first) / 1e6:.0f} ms); {len(shared)} open(s) followed, master log "
          f"{[(e['who'][-5:], e['state']) for e in log]}")
