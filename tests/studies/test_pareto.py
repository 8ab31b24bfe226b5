"""The per-tier Pareto of a sweep (studies/pareto.py): the points, the frontier, and no point made up."""

from __future__ import annotations

from pathlib import Path

from rushhour.studies.knee import Step, TierStep
from rushhour.studies.pareto import pareto_points


def tier(name: str, tpot_ms: float | None, tokens_s: float | None) -> TierStep:
    return TierStep(tier=name, priority=0, requests=10, served=10, offered_rps=1.0, goodput_per_s=1.0, goodput=1.0,
                    drop_rate=0.0, drop_low=0.0, drop_high=0.1, ttft_p99_ms=100.0, ttft_p99_ci=None, e2e_p99_ms=200.0,
                    status="pass", confident=True, tpot_p50_ms=tpot_ms, output_tokens_per_s=tokens_s)


def step(index: int, replicas: int | None, *tiers: TierStep) -> Step:
    return Step(index=index, scale=float(index + 1), replicas=replicas, run_dir="", run_id="r", seed=1,
                duration_s=10.0, offered_rps=1.0, valid=True, tiers=list(tiers))


def test_the_frontier_per_tier() -> None:
    points = pareto_points([
        step(0, 2, tier("gold", 10.0, 200.0), tier("bulk", 10.0, 50.0)),   # gold: 100 tok/s/user, 100 per replica
        step(1, 2, tier("gold", 20.0, 400.0), tier("bulk", None, 80.0)),   # gold: 50, 200 — both on the frontier
        step(2, 2, tier("gold", 25.0, 300.0), tier("bulk", 10.0, None)),   # gold: 40, 150 — dominated by step 1
        step(3, None, tier("gold", 40.0, 100.0)),                          # no replica count: per stack, 25, 100
    ])
    gold = {(p.step): (p.per_user, p.per_replica, p.frontier) for p in points if p.tier == "gold"}
    assert gold == {0: (100.0, 100.0, True), 1: (50.0, 200.0, True), 2: (40.0, 150.0, False),
                    3: (25.0, 100.0, False)}
    # a tier's point needs both figures: bulk's steps without a TPOT or without reported tokens give none
    assert [(p.step, p.frontier) for p in points if p.tier == "bulk"] == [(0, True)]


def test_the_sweep_reports_show_the_table_and_the_plot(tmp_path: Path) -> None:
    from rushhour.reports.sweep import write_sweep_reports
    from rushhour.studies.knee import analyse_sweep

    steps = [step(0, 1, tier("gold", 10.0, 200.0)), step(1, 1, tier("gold", 20.0, 400.0))]
    paths = write_sweep_reports(analyse_sweep(steps, sweep_id="s", scenario="x", mode="steady", created_at="now"),
                                tmp_path)
    page = paths["html"].read_text()
    assert 'id="pareto"' in page and "output tokens/s per replica" in page
    assert "| gold | 1 | 2× | 1 | 50.0 | 400.0 | yes |" in paths["markdown"].read_text()
