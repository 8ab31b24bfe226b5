"""Users who give up, end to end: a slow tier with little patience abandons requests, and the testbed saw the cancels.

Ground truth is the testbed's ledger: every attempt the client marked ``abandoned`` (no first token
within the user's patience, connection closed) is a client cancel there, and the audit classes it
``abandoned`` (not served), judges the persona's ``max_abandon_rate`` and counts the re-asks.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rushhour.audit import run_audit
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.record import read_shard, shard_paths

pytestmark = pytest.mark.e2e

SCENARIO = """
name: e2e-patience
seed: 21
target:
  url: testbed
  profile: vllm
  testbed: {preset: tiny, replicas: 1, speed: 0.25}
  metrics: null
tiers:
  - name: batch
    priority: 0
    slo: {max_abandon_rate: 0.05}
personas:
  - kind: chat
    name: hurried
    tier: batch
    arrival: {process: poisson, rate: 15}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: uniform, low: 400, high: 900}
    output_tokens: {dist: uniform, low: 100, high: 200}
    patience_s: {dist: constant, value: 0.6}
    on_abandon: retry
    abandon_retries: 1
phases:
  - {name: main, duration: 8s}
drain_s: 10
calibration: {probes: 0}
"""


def _requests(run_dir: Path) -> list[dict[str, Any]]:
    lines = [line for p in shard_paths(run_dir) for line in read_shard(p).lines]
    return [line for line in lines if line.get("kind") == "request"]


def test_impatient_users_abandon_and_the_testbed_sees_client_cancels(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    result = run_scenario(str(path), RunOptions(out_dir=tmp_path / "runs", live=False))
    run_dir = result.run_dir
    assert run_dir is not None
    records = _requests(run_dir)
    ledger = {row["request_id"]: row for row in
              (json.loads(line) for line in (run_dir / "testbed-ledger.jsonl").read_text().splitlines() if line)}
    abandoned = [r for r in records if r["abandoned"]]
    assert len(abandoned) >= 5, Counter(str(r.get("status")) for r in records)
    for r in abandoned:
        assert r["first_token_ns"] is None and not r["client_timeout"]
        # the server's own record: the client went away (a cancel), never served
        assert ledger[r["request_id"]]["outcome"] == "cancelled", ledger[r["request_id"]]
    # a user who gave up asked again once: a new logical request for the same turn, sent later
    by_turn = Counter((r["session_id"], r["step"]) for r in records)
    assert any(n == 2 for n in by_turn.values())
    assert max(by_turn.values()) <= 2
    summary = run_audit(run_dir)
    tier = summary.tiers[0]
    assert tier.by_class["abandoned"] == len({r["logical_id"] for r in abandoned})
    assert tier.unserved >= tier.by_class["abandoned"]  # not served: counted in the headline
    persona = tier.personas[0]
    assert persona.abandoned == tier.by_class["abandoned"] and persona.abandon_rate is not None
    verdicts = [v for v in summary.verdicts if v.check == "persona.hurried.max_abandon_rate"]
    assert len(verdicts) == 1 and not verdicts[0].passed, verdicts
    assert tier.sessions is not None and tier.sessions.failed_by_class.get("abandoned", 0) > 0
