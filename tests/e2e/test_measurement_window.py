"""A warm-up that would fail the SLO is left out: the measured window passes (testbed on loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rushhour.audit.build import audit_run
from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.manifest import read_manifest, write_manifest

pytestmark = pytest.mark.e2e

# A cold start: the replica is 40× slower for the first 8 s (the warm-up), then normal for the peak.
SCENARIO = """
name: e2e-warmup
seed: 5
target:
  url: testbed
  profile: llm-d
  model: testbed-model
  testbed:
    preset: tiny
    replicas: 1
    faults: [{kind: slow_replica, at_s: 0, duration_s: 8, factor: 40, name: cold-start}]
  metrics: null
tiers:
  - name: interactive
    priority: 100
    slo:
      ttft_ms: {p90: 1000}
      phases:
        peak: {ttft_ms: {p90: 1000}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {process: poisson, rate: 5}
    turns: 1
    prompt_tokens: {dist: uniform, low: 20, high: 200}
    output_tokens: {dist: uniform, low: 4, high: 16}
phases:
  - {name: warm-up, duration: 8s}
  - {name: peak, duration: 10s}
calibration: {probes: 0}
drain_s: 5
"""


def test_warm_up_failing_the_slo_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    result = run_scenario(str(path), RunOptions(out_dir=tmp_path / "runs", processes=1))
    assert result.run_dir is not None
    summary = audit_run(result.run_dir)
    # every check passes; the exit code is 0 unless the generator itself fell behind (a busy test machine), when
    # the run is invalid (2) whatever its checks say: judged by the verdicts, the exit code must follow them
    assert all(v.passed for v in summary.verdicts), [v.message for v in summary.verdicts]
    valid = summary.validity.valid
    assert summary.exit_code == (0 if valid else 2), (summary.exit_code, summary.validity.reasons)
    assert summary.measurement.excluded_phases == ["warm-up"]
    tier = summary.tiers[0]
    warm, peak = tier.phases
    assert warm.phase == "warm-up" and not warm.measured and peak.measured
    assert tier.excluded is not None and tier.excluded.requests == warm.requests > 10
    assert tier.requests == peak.requests >= 10
    assert warm.ttft_ms.p90 is not None and peak.ttft_ms.p90 is not None
    assert warm.ttft_ms.p90 > 1000 > peak.ttft_ms.p90
    checks = {v.check: v for v in summary.verdicts}
    assert checks["ttft_ms.p90"].passed and checks["peak: ttft_ms.p90"].passed
    print(f"measured p90 {checks['ttft_ms.p90'].observed:.0f} ms, warm-up p90 {warm.ttft_ms.p90:.0f} ms")

    # the same run judged whole (measure: true on the warm-up, the old behaviour) fails the SLO
    manifest = read_manifest(result.run_dir)
    assert manifest.scenario is not None
    manifest.scenario["phases"][0]["measure"] = True
    write_manifest(result.run_dir, manifest)
    whole = audit_run(result.run_dir)
    assert whole.measurement.excluded_phases == [] and whole.exit_code == (1 if whole.validity.valid else 2)
    verdict = next(v for v in whole.verdicts if v.check == "ttft_ms.p90")
    assert not verdict.passed and verdict.observed is not None and verdict.observed > 1000
    print(f"whole-run p90 {verdict.observed:.0f} ms")
    # the per-phase check does not move: it judges the peak's requests either way
    assert next(v for v in whole.verdicts if v.check == "peak: ttft_ms.p90").passed
