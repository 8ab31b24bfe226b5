"""Retries, fallback and the circuit breaker in virtual time agree with real time (issue 16).

The persona layer is one code path (``loadgen/flow``): the same retry decisions, fallback switches and
breaker transitions run over real HTTP against two testbeds and over the simulated stacks. An injected
503 window on the primary makes attempts retry, then fall back to the standby route; the primary's
breaker opens, probes while the window lasts, and closes after it. Per tier, the logical requests by
class, the attempts by class, the client's own refusals and the route that ended each request agree
within the validation tolerance (5 % of the tier's requests), and both runs' breakers open and close.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.records.record import read_shard, shard_paths
from rushhour.sim.run import SimOptions, simulate

pytestmark = pytest.mark.e2e

SCENARIO = """
name: sim-resilience
seed: 11
target:
  url: testbed
  profile: llm-d
  testbed:
    preset: tiny
    replicas: 1
    faults:
      - {kind: error, at_s: 1.5, duration_s: 2.5, status: 503}
  metrics: null
tiers:
  - {name: interactive, priority: 100}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {process: poisson, rate: 20}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: uniform, low: 20, high: 200}
    output_tokens: {dist: uniform, low: 4, high: 16}
phases:
  - {name: main, duration: 6s}
drain_s: 2
resilience:
  timeouts: {connect_s: 1, ttft_s: 2, total_s: 5}
  retries: {on: ["503"], max_attempts: 2, backoff: fixed, base_s: 0.2}
  fallback:
    - {name: standby, url: testbed, profile: llm-d, testbed: {preset: tiny, replicas: 1}}
  breaker: {fail_max: 3, reset_timeout_s: 1}
calibration: {probes: 0}
"""
TOLERANCE = 0.05  # of the tier's requests, as tests/e2e/test_sim_validation.py


def _audit(run_dir: Path) -> dict[str, Any]:
    from rushhour.audit import run_audit

    run_audit(run_dir)
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return summary


def _lines(run_dir: Path) -> list[dict[str, Any]]:
    return [line for p in shard_paths(run_dir) for line in read_shard(p).lines]


def disagreements(real: dict[str, Any], sim: dict[str, Any]) -> list[str]:
    """Per tier: every count of these tables that differs by more than the tolerance."""
    problems = []
    sim_tiers = {t["name"]: t for t in sim["tiers"]}
    for tier in real["tiers"]:
        other = sim_tiers[tier["name"]]
        n = max(tier["requests"], 1)
        for table in ("by_class", "attempts_by_class", "client_reasons", "routes"):
            a_t, b_t = tier[table], other[table]
            for key in sorted(set(a_t) | set(b_t)):
                a, b = a_t.get(key, 0), b_t.get(key, 0)
                if abs(a - b) > TOLERANCE * n:
                    problems.append(f"{tier['name']} {table}[{key}]: real {a}, simulated {b} (of {n})")
    return problems


def test_compare_names_each_table() -> None:
    def summary(moved: int) -> dict[str, Any]:
        return {"tiers": [{"name": "t", "requests": 100, "by_class": {"served": 100}, "attempts_by_class": {},
                           "client_reasons": {"breaker_open": 10}, "routes": {"standby": moved}}]}

    assert disagreements(summary(30), summary(34)) == []
    assert disagreements(summary(30), summary(40)) == ["t routes[standby]: real 30, simulated 40 (of 100)"]


def test_retries_fallback_and_breaker_agree_in_virtual_time(tmp_path: Path) -> None:
    scenario = tmp_path / "resilience.yaml"
    scenario.write_text(SCENARIO)
    real = run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "real", live=False))
    assert real.run_dir is not None
    sim = simulate(str(scenario), SimOptions(out_dir=tmp_path / "sim"))
    simulation = json.loads((sim.run_dir / "run.json").read_text())["simulation"]
    assert simulation["not_modelled"] == [] and "imitates" not in simulation["fallback_routes"]["standby"]
    real_s, sim_s = _audit(real.run_dir), _audit(sim.run_dir)
    for s in (real_s, sim_s):
        (tier,) = s["tiers"]
        assert tier["requests"] > 80 and tier["routes"].get("standby", 0) > 10, tier["routes"]
        assert tier["attempts"] > tier["requests"]  # retries happened
        assert tier["client_reasons"].get("breaker_open", 0) > 0
    problems = disagreements(real_s, sim_s)
    assert not problems, "; ".join(problems)
    # the same retry links and breaker life in both: retried attempts name their reason; the primary's
    # breaker opened during the window and closed after it
    for run_dir in (real.run_dir, sim.run_dir):
        lines = _lines(run_dir)
        retried = [r for r in lines if r["kind"] == "request" and r["attempt"] > 1]
        assert retried and all(r["retry_reason"] for r in retried)
        moved = [r for r in lines if r["kind"] == "request" and r["route"] == "standby"]
        assert moved and all(r["retry_reason"] for r in moved)
        changes = sorted((r for r in lines if r["kind"] == "breaker" and r["route"] == "primary"),
                         key=lambda r: r["ts_ns"])
        assert changes and changes[0]["state"] == "open" and changes[-1]["state"] == "closed"
        assert 1.5e9 <= changes[0]["ts_ns"] <= 4.0e9 and changes[-1]["ts_ns"] >= 4.0e9
    # the audit's breaker figures come out of a simulated run as out of a real one
    opens = []
    for s in (real_s, sim_s):
        (primary,) = [r for r in s["routes"] if r["route"] == "primary"]
        assert primary["breaker_open_s"] > 0.5 and primary["moved_because"] == {}
        (standby,) = [r for r in s["routes"] if r["route"] == "standby"]
        assert any(k.startswith("breaker_open") for k in standby["moved_because"]), standby["moved_because"]
        opens.append(primary["breaker_open_s"] + primary["breaker_half_open_s"])
    assert abs(opens[0] - opens[1]) <= 0.5, opens
    print("real", {k: real_s["tiers"][0][k] for k in ("requests", "attempts", "client_reasons", "routes")},
          "sim", {k: sim_s["tiers"][0][k] for k in ("requests", "attempts", "client_reasons", "routes")},
          "breaker not closed (s)", opens)
