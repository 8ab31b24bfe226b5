"""llm-d's fairness_id cap end to end: the testbed's router lumps tenants past its cap under "other", as llm-d's
metrics do, and the audit says the router's per-tenant figures are partial (its own stay whole)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from support import run

from .run_helpers import last_scrape

pytestmark = pytest.mark.e2e
QUEUE = "llm_d_epp_flow_control_request_queue_duration_seconds_count"
OUTCOMES = "llm_d_epp_flow_control_requests_total"

# a cap of 4 (llm-d's is 1,000) so that a few seconds of 12 tenants go past it
SCENARIO = """
name: e2e-fairness-cap
seed: 5
target:
  url: testbed
  profile: llm-d
  model: testbed-model
  testbed: {preset: tiny, replicas: 1, speed: 0.5, config: {flow_control: {fairness_id_cap: 4}}}
  metrics: {url: auto, interval_s: 1s}
calibration: {probes: 0}
tiers:
  - {name: shared, priority: 0, tenants: 12}
personas:
  - {kind: chat, name: chat, tier: shared, turns: 1, arrival: {process: poisson, rate: 12},
     prompt_tokens: 32, output_tokens: 8}
phases:
  - {name: peak, duration: 5s}
drain_s: 5
"""


def test_tenants_past_the_cap_are_lumped_and_named(tmp_path: Path) -> None:
    _, run_dir, _ = run(SCENARIO, tmp_path, "--no-report")
    from rushhour.audit import run_audit

    summary = run_audit(run_dir)
    fairness_ids: Counter[str] = Counter()
    for labels, value in last_scrape(run_dir, QUEUE).items():
        fairness_ids[dict(labels)["fairness_id"]] += int(value)
    assert len(fairness_ids) == 5 and "other" in fairness_ids, fairness_ids  # 4 tenants of their own, then "other"
    # the per-tenant series lose no request: together they count what the per-priority counter counts
    outcomes = last_scrape(run_dir, OUTCOMES)
    assert sum(fairness_ids.values()) == sum(outcomes.values()), (fairness_ids, outcomes)
    (tier,) = summary.tiers
    tenants = {t.tenant: t.requests for t in tier.fairness.tenants}  # rushhour's own per-tenant figures: whole
    print(fairness_ids, tenants)
    assert len(tenants) > 4 and sum(tenants.values()) == tier.requests, (tenants, tier.requests)
    (finding,) = [f for f in summary.findings if f.kind == "fairness_id_capped"]
    assert finding.severity == "warning" and "`other` among them" in finding.message, finding
    assert finding.data["other_seen"] and finding.data["label_values_seen"] == 5
    assert finding.data["tenants"] == len(tenants), finding
