"""Decode figures end to end, against the testbed's ledger: output tokens/s per tier, and pooled ITL beside TPOT.

A short testbed run with per-token times recorded. The audit's output tokens/s per tier must be the tokens the
testbed itself says it produced for that tier's served requests (its ledger, joined to the records by request
id) over the run's duration; its pooled ITL must pool every gap of every served stream (one per token after the
first), and the reports must show it beside TPOT.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rushhour.audit import run_audit
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.record import read_shard, shard_paths
from rushhour.reports import write_reports

pytestmark = pytest.mark.e2e

SCENARIO = """
name: e2e-decode
seed: 5
target:
  url: testbed
  profile: vllm
  testbed: {preset: tiny, replicas: 1, speed: 1.0}
  metrics: null
record_token_times: true
tiers:
  - {name: interactive, priority: 100}
  - {name: batch, priority: 0}
personas:
  - {kind: chat, name: chat, tier: interactive, arrival: {process: poisson, rate: 4}, turns: 1,
     system_prompt_tokens: 0, prompt_tokens: {dist: uniform, low: 50, high: 200},
     output_tokens: {dist: uniform, low: 10, high: 40}}
  - {kind: chat, name: bulk, tier: batch, arrival: {process: poisson, rate: 2}, turns: 1,
     system_prompt_tokens: 0, prompt_tokens: {dist: uniform, low: 50, high: 200},
     output_tokens: {dist: uniform, low: 40, high: 80}}
phases:
  - {name: main, duration: 5s}
drain_s: 10
calibration: {probes: 0}
"""


def test_tokens_per_second_match_the_ledger_and_itl_pools_every_gap(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    run_dir = run_scenario(str(path), RunOptions(out_dir=tmp_path / "runs", live=False)).run_dir
    assert run_dir is not None
    records = [line for p in shard_paths(run_dir) for line in read_shard(p).lines if line.get("kind") == "request"]
    tier_of = {r["request_id"]: r["tier"] for r in records}
    ledger = [json.loads(line) for line in (run_dir / "testbed-ledger.jsonl").read_text().splitlines() if line]
    summary = run_audit(run_dir)
    for tier in summary.tiers:
        served = [row for row in ledger if row["outcome"] == "served" and tier_of.get(row["request_id"]) == tier.name]
        assert len(served) >= 5, tier.name
        # the testbed's own count of what it produced for the tier, over the audited seconds
        truth = sum(row["output_tokens"] for row in served) / summary.run.duration_s
        assert tier.output_tokens_per_s == pytest.approx(truth, rel=1e-3), tier.name
        streams = [r for r in records if r["tier"] == tier.name and r["status"] == 200 and r["complete"]]
        itl = tier.latency.itl_ms
        assert itl is not None and itl.n == sum(len(r["token_ns"]) - 1 for r in streams), tier.name
        assert itl.p50 is not None and itl.p50 >= 0 and tier.latency.tpot_ms.n == len(streams)
    paths = write_reports(summary, run_dir)
    assert "pooled, " in paths["markdown"].read_text() and "inter-token gap, pooled" in paths["html"].read_text()
