"""Measurement windows and per-phase SLOs on synthetic runs with known answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rushhour.audit.build import audit_run
from rushhour.audit.errors import AuditError
from rushhour.audit.ledger import audit_counts_from_summary
from rushhour.audit.phases import measured_flags, measured_mask, phase_of
from rushhour.scenarios.model import Scenario
from tests.audit.helpers import MS, RunBuilder, S, scenario

PHASES = [{"name": "warm-up", "duration": 10}, {"name": "peak", "duration": 20}, {"name": "Cool_Down", "duration": 10}]


def _tiers(slo: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "interactive", "priority": 100, "slo": slo}, {"name": "batch", "priority": 0, "slo": {}}]


def _run(tmp_path: Path, slo: dict[str, Any], phases: list[dict[str, Any]] | None = None) -> Path:
    """warm-up: 20 served at 3 s TTFT + 5 queue_full; peak: 40 served at 100 ms; cool-down: 10 served at 2.5 s."""
    run = RunBuilder(tmp_path, tiers=_tiers(slo), duration_s=40.0, scenario_extra={"phases": phases or PHASES})
    for i in range(20):
        t = i * 400 * MS
        run.request(sent_ns=t, first_token_ns=t + 3000 * MS, last_token_ns=t + 3500 * MS, done_ns=t + 3500 * MS)
    for i in range(5):
        run.dropped(status=429, reason="rejected-saturated", sent_ns=8 * S + i * 100 * MS)
    for i in range(40):
        run.request(sent_ns=10 * S + i * 400 * MS)
    for i in range(10):
        t = 30 * S + i * 500 * MS
        run.request(sent_ns=t, first_token_ns=t + 2500 * MS, last_token_ns=t + 2600 * MS, done_ns=t + 2600 * MS)
    return run.close()


def test_warm_up_and_cool_down_are_left_out_by_default(tmp_path: Path) -> None:
    summary = audit_run(_run(tmp_path, {"ttft_ms": {"p90": 1000}, "max_drop_rate": 0.01}))
    tier = summary.tier("interactive")
    assert tier.requests == 40 and tier.by_class["served"] == 40 and tier.unserved == 0
    assert tier.latency.ttft_ms.p90 == pytest.approx(100.0, abs=1.0)
    assert tier.excluded is not None
    assert tier.excluded.requests == 35 and tier.excluded.by_class["queue_full"] == 5
    assert tier.excluded.attempts_by_class["served"] == 30
    m = summary.measurement
    assert m.measured_phases == ["peak"] and m.excluded_phases == ["warm-up", "Cool_Down"]
    assert m.excluded_spans == [[0.0, 10.0], [30.0, 40.0]]
    assert m.excluded_requests == 35 and m.excluded_attempts == 35
    assert summary.passed and summary.exit_code == 0
    # the ledger saw every request: the cross-reading adds the excluded attempts back
    assert audit_counts_from_summary(summary)["interactive"]["served"] == 70


def test_per_phase_slices_reuse_the_whole_run_rules(tmp_path: Path) -> None:
    summary = audit_run(_run(tmp_path, {}))
    phases = {p.phase: p for p in summary.tier("interactive").phases}
    assert [p.phase for p in summary.tier("interactive").phases] == ["warm-up", "peak", "Cool_Down"]
    assert not phases["warm-up"].measured and phases["peak"].measured
    assert phases["warm-up"].requests == 25 and phases["warm-up"].unserved == 5
    assert phases["warm-up"].drop_rate.value == pytest.approx(0.2)
    assert phases["peak"].requests == 40 and phases["peak"].ttft_ms.p50 == pytest.approx(100.0, abs=1.0)
    assert phases["Cool_Down"].ttft_ms.p50 == pytest.approx(2500.0, abs=1.0)
    assert summary.tier("batch").phases[1].requests == 0


def test_measure_true_keeps_the_old_whole_run_judgement(tmp_path: Path) -> None:
    phases = [dict(p, measure=True) for p in PHASES]
    summary = audit_run(_run(tmp_path, {"ttft_ms": {"p90": 1000}}, phases))
    tier = summary.tier("interactive")
    assert tier.requests == 75 and tier.excluded is None and summary.measurement.excluded_phases == []
    assert tier.latency.ttft_ms.p90 is not None and tier.latency.ttft_ms.p90 > 1000
    assert summary.exit_code == 1


def test_phase_slo_verdicts_are_named_by_phase(tmp_path: Path) -> None:
    slo = {"ttft_ms": {"p90": 1000}, "phases": {
        "peak": {"ttft_ms": {"p90": 50, "p99": 2000}},
        "warm-up": {"max_drop_rate": 0.1, "judge": "point"},
    }}
    summary = audit_run(_run(tmp_path, slo))
    by_check = {v.check: v for v in summary.verdicts if v.tier == "interactive"}
    assert by_check["ttft_ms.p90"].passed
    peak90 = by_check["peak: ttft_ms.p90"]
    assert not peak90.passed and not peak90.inconclusive and peak90.observed == pytest.approx(100.0, abs=1.0)
    assert peak90.message.startswith("interactive peak: ttft_ms.p90")
    # 40 samples cannot estimate a p99: the same minimum-sample rule as the whole run
    assert by_check["peak: ttft_ms.p99"].inconclusive
    # a phase named explicitly is judged even when it is out of the measurement window
    assert not by_check["warm-up: max_drop_rate"].passed
    assert by_check["warm-up: max_drop_rate"].observed == pytest.approx(0.2)
    assert summary.exit_code == 1


def test_phase_slo_takes_the_tiers_judge(tmp_path: Path) -> None:
    slo = {"judge": "bound", "phases": {"peak": {"ttft_ms": {"p90": 1000}}}}
    summary = audit_run(_run(tmp_path, slo))
    verdict = next(v for v in summary.verdicts if v.check == "peak: ttft_ms.p90")
    assert verdict.judge == "bound" and verdict.passed  # 40 ≥ 29 samples: bounded


def test_slo_file_naming_an_unknown_phase_is_one_line(tmp_path: Path) -> None:
    run = _run(tmp_path, {})
    slo = tmp_path / "slo.yaml"
    slo.write_text("tiers:\n  interactive:\n    phases:\n      nope: {max_drop_rate: 0.1}\n")
    with pytest.raises(AuditError, match="unknown phase 'nope'"):
        audit_run(run, slo_file=slo)


def test_scenario_validates_phase_keys() -> None:
    body = scenario(_tiers({"phases": {"nope": {"max_drop_rate": 0.1}}}), phases=PHASES)
    with pytest.raises(ValidationError, match="unknown phase 'nope'"):
        Scenario.model_validate(body)
    body = scenario(_tiers({}), phases=[{"name": "a", "duration": 5, "measure": False}])
    with pytest.raises(ValidationError, match="nothing would be judged"):
        Scenario.model_validate(body)
    nested = scenario(_tiers({"phases": {"peak": {"phases": {"peak": {}}}}}), phases=PHASES)
    with pytest.raises(ValidationError, match="cannot name phases again"):
        Scenario.model_validate(nested)


def test_phase_lookup_and_defaults() -> None:
    phases = [{"name": "warmup", "start_s": 0.0, "end_s": 10.0}, {"name": "main", "start_s": 10.0, "end_s": 20.0}]
    assert list(phase_of([0, 9.9e9, 10e9, 25e9, float("nan")], phases)) == [0, 0, 1, 1, -1]
    assert list(measured_mask([1e9, 15e9, float("nan")], phases)) == [False, True, True]
    # only a warm-up phase: the default would leave nothing, so everything is judged
    assert measured_flags([{"name": "Warm-Up"}]) == [True]
    assert measured_flags([{"name": "cool-down", "measure": True}, {"name": "x", "measure": False}]) == [True, False]


def test_per_second_figures_divide_by_the_measured_time(tmp_path: Path) -> None:
    """40 requests in the 20 s peak: 2/s, not 40 over the 40 s run (a sweep step's offered load too)."""
    from rushhour.studies.knee import step_from_summary

    summary = audit_run(_run(tmp_path, {}))
    assert summary.measurement.measured_s == pytest.approx(20.0)
    assert summary.tier("interactive").goodput_per_s == pytest.approx(2.0)
    step = step_from_summary(summary, 0, 1.0, duration_s=40.0)
    assert step.duration_s == pytest.approx(20.0)
    assert step.tiers[0].offered_rps == pytest.approx(2.0)


def test_compare_reads_the_measured_window_too(tmp_path: Path) -> None:
    """rushhour compare's latency samples come from the same requests as the summary's figures."""
    from rushhour.audit import attempts
    from rushhour.audit.build import write_summary
    from rushhour.studies.compare import load_run

    run = _run(tmp_path, {})
    write_summary(audit_run(run), run)
    summary, samples = load_run(run)
    assert len(attempts(run)) == 75
    ttft = samples["interactive"].ttft_ms
    assert len(ttft) == summary.tier("interactive").by_class["served"] == 40
    assert ttft.max() == pytest.approx(100.0, abs=1.0)
