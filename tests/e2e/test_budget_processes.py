"""One budget across `--processes 2`: deliberately uneven traffic still reaches exactly the cap, then stops.

One process drives a busy agent (back-to-back requests), the other a single request and then idles
with a lease it does not use: the master must reclaim it. With an equal share per process the run
would stop at half the cap; with the leased budget it sends exactly ``max_requests`` (the testbed's
ledger agrees), every later attempt is ``not_sent`` with reason ``budget``, and run.json
``budget_usage`` carries the master's account.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.manifest import read_manifest
from rushhour.records.record import read_shard, shard_paths

pytestmark = pytest.mark.e2e

CAP = 60
SCENARIO = f"""
name: e2e-budget-uneven
seed: 5
target:
  url: testbed
  testbed: {{preset: tiny, replicas: 2}}
  metrics: null
calibration: {{probes: 0}}
tiers:
  - {{name: interactive, priority: 100}}
personas:
  - kind: agent_swarm        # agents: 1 -> only process 0 drives it, back to back
    name: heavy
    tier: interactive
    agents: 1
    ramp_s: 0
    steps: 400
    fanout: 1
    tool_time_s: 0
    shared_context_tokens: 64
    task_context_tokens: 16
    append_tokens: 8
    output_tokens: 4
  - kind: agent_swarm        # one request per process, then idle: process 1 holds a lease it never uses
    name: light
    tier: interactive
    agents: 2
    ramp_s: 0
    steps: 1
    fanout: 1
    tool_time_s: 0
    idle_between_tasks_s: 600
    shared_context_tokens: 64
    task_context_tokens: 16
    append_tokens: 8
    output_tokens: 4
phases:
  - {{name: main, duration: 180s}}   # the cap stops the run (~60 requests, seconds on a quiet machine):
                                     # the length only has to outlast a loaded CI machine (it sent 58 in 30 s)
drain_s: 3
budget: {{max_requests: {CAP}}}
"""


def test_uneven_processes_reach_exactly_the_cap(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs", processes=2, live=False))
    assert result.exit_code == 0 and result.run_dir is not None, result
    run_dir = result.run_dir
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == "budget"
    shards = [p for p in shard_paths(run_dir) if not p.name.endswith("-calibration.jsonl")]
    assert len(shards) == 2
    per_shard = {p.name: [r for r in read_shard(p).lines if r["kind"] == "request"] for p in shards}
    sent = {name: [r for r in rows if not r["not_sent"]] for name, rows in per_shard.items()}
    counts = sorted(len(rows) for rows in sent.values())
    assert sum(counts) == CAP, counts  # exactly the cap: not half of it (equal shares), never more
    assert counts[0] <= 2 < counts[1], counts  # deliberately uneven
    ledger = (run_dir / "testbed-ledger.jsonl").read_text().splitlines()
    assert len([line for line in ledger if line.strip()]) == CAP
    refused = [r for rows in per_shard.values() for r in rows if r["not_sent"]]
    assert refused and all(r["reason"] == "budget" for r in refused)
    # both processes were told: each wrote one run-scope budget_reached event
    events = [r for p in shards for r in read_shard(p).lines if r["kind"] == "event" and r["name"] == "budget_reached"]
    assert len(events) == 2 and all(e["detail"]["scope"] == "run" for e in events), events
    usage = manifest.budget_usage or {}
    assert usage["enforcement"] == "one budget, leased by the master"
    assert usage["run"]["requests"] == CAP
    master = usage["master"]
    assert master["reached"] == {"run": "requests"} and master["reclaim_rounds"] >= 1
    assert sum(held["run"]["requests"] for held in master["held"].values()) == CAP
    lease = [p["lease"] for p in usage["processes"].values()]
    waits = [entry["wait_ms_max"] for entry in lease]
    print(f"\nuneven --processes 2: sent {counts} (cap {CAP}); asks {[e['asks'] for e in lease]}, "
          f"longest wait for the master {max(waits):.1f} ms; reclaim rounds {master['reclaim_rounds']}; "
          f"stopped {max(r['sent_ns'] for rows in sent.values() for r in rows) / 1e9:.1f} s into the run")


def test_uneven_processes_share_one_token_cap(tmp_path: Path) -> None:
    """The same uneven load under ``max_tokens``: the run uses the cap up to less than one request's
    reservation (an equal share would stop near half), and passes it at most by what the server counted
    beyond the reservations of requests in flight (one per process here)."""
    limit = 20_000
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace(f"budget: {{max_requests: {CAP}}}", f"budget: {{max_tokens: {limit}}}"))
    result = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs", processes=2, live=False))
    assert result.exit_code == 0 and result.run_dir is not None, result
    manifest = read_manifest(result.run_dir)
    assert manifest.stop_reason == "budget"
    usage = manifest.budget_usage or {}
    assert usage["master"]["reached"] == {"run": "tokens"}
    rows = [r for p in shard_paths(result.run_dir) if not p.name.endswith("-calibration.jsonl")
            for r in read_shard(p).lines if r["kind"] == "request" and not r["not_sent"]]
    used = usage["run"]["tokens"]
    assert used == sum((r["prompt_tokens"] or 0) + (r["output_tokens"] or 0) for r in rows)
    reserved = [(r["prompt_tokens_intended"] or 0) + (r["max_tokens"] or 0) for r in rows]
    over = sorted(max(0, (r["prompt_tokens"] or 0) + (r["output_tokens"] or 0) - res)
                  for r, res in zip(rows, reserved, strict=True))
    assert limit - 2 * max(reserved) < used <= limit + sum(over[-2:]), (used, max(reserved), over[-2:])
    print(f"\ntoken cap {limit:,} across uneven --processes 2: {len(rows)} requests, {used:,} tokens booked "
          f"(reservations {sum(reserved):,})")
