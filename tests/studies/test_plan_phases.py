"""Per-phase SLOs survive a sweep or study step, whose phases replace the scenario's."""

from __future__ import annotations

from rushhour.scenarios import load_scenario
from rushhour.scenarios.model import SLO, Scenario
from rushhour.studies.sweep import scaled_scenario, study_scenario


def _with_phase_slos() -> Scenario:
    demo = load_scenario("demo")
    data = demo.model_dump(mode="json", by_alias=True)
    names = [p.name for p in demo.phases]
    data["tiers"][0]["slo"]["phases"] = {"peak": {"ttft_ms": {"p99": 2000}}, names[0]: {"max_drop_rate": 0.5}}
    return Scenario.model_validate(data)


def test_the_peaks_slo_follows_the_steady_phase() -> None:
    steady = scaled_scenario(_with_phase_slos(), 2.0, step_duration_s=20, warmup_s=5)
    assert steady.tiers[0].slo.phases == {"steady-2x": SLO.model_validate({"ttft_ms": {"p99": 2000}})}
    scaled = scaled_scenario(_with_phase_slos(), 2.0, mode="scale")  # the phases stay: so do their SLOs
    assert set(scaled.tiers[0].slo.phases) == {"peak", "warm-up"}


def test_a_study_cell_drops_phase_slos_it_has_no_phase_for() -> None:
    cell = study_scenario(_with_phase_slos(), 2, "uniform", "moderate", "fifo", duration_s=6, warmup_s=2)
    assert all(not t.slo.phases for t in cell.tiers)


def test_a_cool_down_keeps_the_steps_load_on_and_is_not_judged() -> None:
    from rushhour.audit.phases import measured_flags

    step = scaled_scenario(_with_phase_slos(), 2.0, step_duration_s=6, warmup_s=5, cooldown_s=3)
    rate = step.phases[1].rate_scale
    assert [(p.name, p.duration, p.rate_scale) for p in step.phases] == [
        ("warm-up", 5, rate), ("steady-2x", 6, rate), ("cool-down", 3, rate)]
    assert measured_flags(step.model_dump(mode="json")["phases"]) == [False, True, False]
    assert [p.name for p in scaled_scenario(_with_phase_slos(), 2.0, warmup_s=0).phases] == ["steady-2x"]
