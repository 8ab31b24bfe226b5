"""Sweep and study planning: scales, scaled scenarios, tier mixes, the grid."""

from __future__ import annotations

from pathlib import Path

import pytest

from rushhour.scenarios import load_scenario
from rushhour.scenarios.model import ChatPersona
from rushhour.studies.sweep import (
    DEFAULT_GRID,
    QUICK_GRID,
    SweepError,
    parse_replicas,
    parse_scales,
    plan_study,
    plan_sweep,
    scaled_scenario,
    study_scenario,
    tier_mix,
)


def test_parse() -> None:
    assert parse_scales("0.25..3", 8)[0] == 0.25 and parse_scales("0.25..3", 8)[-1] == 3.0
    assert len(parse_scales("0.25..3", 8)) == 8
    assert parse_scales("2,0.5,1") == [0.5, 1.0, 2.0]
    assert parse_replicas("4,1,2") == [1, 2, 4] and parse_replicas(None) == [None]
    for bad in ("3..1", "x..2", "0,1", ""):
        with pytest.raises(SweepError):
            parse_scales(bad)


def test_scaled_scenario_modes() -> None:
    demo = load_scenario("demo")  # peak phase: rate_scale 3, agents_scale 1
    steady = scaled_scenario(demo, 0.5, step_duration_s=20, warmup_s=5, replicas=4, seed=9)
    assert [(p.name, p.duration, p.rate_scale, p.agents_scale) for p in steady.phases] == [
        ("warm-up", 5.0, 1.5, 0.5), ("steady-0.5x", 20.0, 1.5, 0.5)]
    assert steady.target.testbed.replicas == 4 and steady.seed == 9
    scaled = scaled_scenario(demo, 2.0, mode="scale")
    assert [p.rate_scale for p in scaled.phases] == [1.0, 6.0, 1.0]
    assert [p.agents_scale for p in scaled.phases] == [0.5, 2.0, 0.5]


def test_plan_sweep_writes_readable_scenarios(tmp_path: Path) -> None:
    plan = plan_sweep(load_scenario("demo"), [0.5, 1.0], out_dir=tmp_path, replicas=[1, 2], sweep_id="sweep-x")
    assert [s.dir.name for s in plan.steps] == ["step-00", "step-01", "step-02", "step-03"]
    assert [(s.replicas, s.scale) for s in plan.steps] == [(1, 0.5), (1, 1.0), (2, 0.5), (2, 1.0)]
    again = load_scenario(plan.steps[3].scenario_path)
    assert again.target.testbed.replicas == 2 and again.phases[-1].rate_scale == 3.0


def test_tier_mix() -> None:
    assert tier_mix(3, "rare") == pytest.approx([1 / 7, 2 / 7, 4 / 7])
    assert tier_mix(2, "common") == pytest.approx([2 / 3, 1 / 3])
    assert sum(tier_mix(10, "uniform")) == pytest.approx(1.0)
    with pytest.raises(SweepError):
        tier_mix(2, "odd")


def test_study_plan(tmp_path: Path) -> None:
    base = load_scenario("multitier-study")
    cell = study_scenario(base, 4, "uniform", "saturated", "llm-d", duration_s=10)
    assert [t.name for t in cell.tiers] == ["t0", "t1", "t2", "t3"]
    assert [t.priority for t in cell.tiers] == [30, 20, 10, 0]
    assert sum(p.arrival.rate for p in cell.personas if isinstance(p, ChatPersona)) == pytest.approx(7.0 * 1.5)
    assert cell.target.profile == "llm-d"
    plan = plan_study(base, QUICK_GRID, out_dir=tmp_path)
    assert len(plan.steps) == QUICK_GRID.size == 3
    assert [s.meta["policy"] for s in plan.steps] == ["fifo", "fifo", "headroom"]
    assert DEFAULT_GRID.size <= 30  # the default grid must stay around ten minutes
