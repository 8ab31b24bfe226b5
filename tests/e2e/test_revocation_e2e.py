"""llm-d demand-driven revocation end to end: `rushhour run` against the testbed's llm-d profile with
`flow_control.revocation` on, a premium tier (priority 10) and a sheddable one (priority -1). The client's
`preempted` per tier, the testbed's ledger and the router's revocation counter per priority agree, the cross-check
matches, and the floor "no preemption of requests in progress" (`slo.max_preempted_in_progress: 0`) fails."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from support import run

from .run_helpers import last_scrape

pytestmark = pytest.mark.e2e
REVOCATIONS = "llm_d_epp_flow_control_revocations_issued_total"

# non-streaming: every revoked request is answered 429 evicted before any byte (a revoked stream is cut after
# its 200, class failed at the client like any network cut, and is only tolerance in the cross-check)
SCENARIO = """
name: e2e-revocation
seed: 7
target:
  url: testbed
  profile: llm-d
  model: testbed-model
  stream: false
  testbed: {preset: tiny, replicas: 1, speed: 0.5, config: {flow_control: {revocation: true}}}
calibration: {probes: 0}
tiers:
  - {name: premium, priority: 10, slo: {max_drop_rate: 1.0}}
  - {name: batch, priority: -1, slo: {max_preempted_in_progress: 0}}
personas:
  - {kind: chat, name: chat, tier: premium, turns: 1, arrival: {process: poisson, rate: 3},
     prompt_tokens: 64, output_tokens: 16}
  - {kind: chat, name: bulk, tier: batch, turns: 1, arrival: {process: poisson, rate: 6},
     prompt_tokens: 64, output_tokens: 160}
phases:
  - {name: peak, duration: 12s}
drain_s: 5
"""


def test_revocations_agree_between_client_ledger_and_counter(tmp_path: Path) -> None:
    done, run_dir, _ = run(SCENARIO, tmp_path, "--no-report")
    from rushhour.audit import run_audit
    from rushhour.audit.ledger import compare_with_ledger

    summary = run_audit(run_dir)
    tiers = {t.name: t for t in summary.tiers}
    preempted = {name: t.attempts_by_class.get("preempted", 0) for name, t in tiers.items()}
    assert preempted["batch"] >= 3, (preempted, done.stdout[-2000:])  # the premium tier's demand revoked batch work
    assert preempted["premium"] == 0, preempted  # priority >= 0 is never revoked

    # the testbed's ledger: every revocation is a preempted/evicted line of priority -1
    ledger = [json.loads(line) for line in (run_dir / "testbed-ledger.jsonl").read_text().splitlines() if line]
    by_priority = Counter(r["priority"] for r in ledger if r["outcome"] == "preempted")
    assert by_priority == Counter({-1: preempted["batch"]}), by_priority
    assert all(r["reason"] == "evicted" and r["status"] == 429 for r in ledger if r["outcome"] == "preempted")

    # the router's counter per victim priority, at the last scrape
    counter = {dict(labels)["priority"]: value for labels, value in last_scrape(run_dir, REVOCATIONS).items()}
    assert counter == {"-1": float(preempted["batch"])}, (counter, preempted, done.stdout[-2000:])

    # the audit's cross-check compared the same numbers and they match
    (check,) = [c for c in summary.crosscheck if c.metric == REVOCATIONS]
    assert (check.tier, check.priority, check.client, check.server, check.matches) == (
        "batch", -1, preempted["batch"], float(preempted["batch"]), True)
    assert all(c.matches for c in summary.crosscheck), summary.crosscheck
    assert not [f for f in summary.findings if f.kind in ("crosscheck", "timing_mismatch")], summary.findings

    # the audit agrees with the ledger request by request
    comparison = compare_with_ledger(run_dir, summary)
    assert comparison.count_problems() == [], comparison.count_problems()
    assert comparison.ledger_counts["batch"].get("preempted") == preempted["batch"]

    # the floor "no preemption of requests in progress": revocations count against it and fail the gate
    (floor,) = [v for v in summary.verdicts if v.check == "max_preempted_in_progress"]
    assert (floor.tier, floor.observed, floor.passed) == ("batch", float(preempted["batch"]), False)
    assert tiers["batch"].preempted_in_progress == preempted["batch"]
    assert not summary.passed and summary.exit_code == 1
