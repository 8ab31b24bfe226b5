"""`rushhour sweep --search` end to end: real testbed and Locust processes, short steps, the CLI as a process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import rushhour

pytestmark = pytest.mark.e2e

SCENARIO = """
name: search-e2e
seed: 3
target:
  url: testbed
  profile: llm-d
  model: testbed
  testbed: {preset: tiny, replicas: 1, speed: 1.0, config: {queue_ttl_s: 2}}
  metrics: null
tiers:
  - name: interactive
    priority: 100
    slo: {ttft_ms: {p90: 1000}, max_drop_rate: 0.05}
  - name: batch
    priority: 0
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {process: poisson, rate: 6}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: uniform, low: 100, high: 600}
    output_tokens: {dist: uniform, low: 20, high: 80}
  - kind: chat
    name: bulk
    tier: batch
    arrival: {process: poisson, rate: 2}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: uniform, low: 100, high: 600}
    output_tokens: {dist: uniform, low: 20, high: 80}
phases:
  - {name: peak, duration: 30s}
calibration: {probes: 0}
drain_s: 2
"""


def test_search_brackets_the_boundary_of_a_saturating_testbed(tmp_path: Path) -> None:
    scenario = tmp_path / "search.yaml"
    scenario.write_text(SCENARIO)
    # 1× (8 req/s) is far below what one tiny replica serves, 8× (64 req/s) far above: the boundary is inside
    run = rushhour("sweep", str(scenario), "--search", "--scale", "1..8", "--step-duration", "6s", "--warmup", "0",
                   "--max-probes", "4", "--precision", "0.5", "--out", str(tmp_path / "runs"), timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    probes_printed = [line for line in run.stderr.splitlines() if line.strip().startswith("probe ")]
    assert len(probes_printed) >= 3 and all(" vs ≤ " in line and "[" in line for line in probes_printed)
    (root,) = (tmp_path / "runs").glob("sweep-*")
    data = json.loads((root / "sweep.json").read_text())
    search = data["search"]
    scales = [p["scale"] for p in search["probes"]]
    assert scales[0] == 1.0 and 8.0 in scales and len(scales) >= 3
    assert search["status"] == "within", search["sentence"]
    assert search["pass_scale"] < search["fail_scale"] and search["pass_rps"] < search["fail_rps"]
    # an invalid probe (a loaded machine's generator lag) is repeated with another seed, as the search must: on
    # a loaded CI machine the repeats at 1× and 8× used all 4 probes; otherwise the search bisects the range
    repeated = [p["scale"] for p in search["probes"] if not p["valid"]]
    assert any(1.0 < s < 8.0 for s in scales) or (repeated and len(set(scales)) < len(scales)), \
        ("the search bisected the range", search["probes"])
    interactive = [t for p in search["probes"] for t in p["tiers"] if t["tier"] == "interactive"]
    assert interactive and all(t["checks"] for t in interactive)
    assert data["answers"][0] == search["sentence"] and run.stdout.startswith(f"• {search['sentence'][:40]}")
    assert len(data["steps"]) == len(scales), "every probe is a step of the sweep (knees and charts too)"
    assert 'id="search"' in (root / "sweep.html").read_text()


def test_search_refuses_a_scenario_without_slo(tmp_path: Path) -> None:
    scenario = tmp_path / "no-slo.yaml"
    scenario.write_text(SCENARIO.replace("    slo: {ttft_ms: {p90: 1000}, max_drop_rate: 0.05}\n", ""))
    run = rushhour("sweep", str(scenario), "--search", "--out", str(tmp_path / "runs"), timeout=120)
    assert run.returncode == 2 and "no tier has an SLO" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "runs").exists()
