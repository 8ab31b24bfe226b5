"""Sweep, study and compare reports render from hand-built results (escaped, self-contained)."""

from __future__ import annotations

from pathlib import Path

from rushhour.reports.sweep import render_study_markdown, write_study_reports, write_sweep_reports
from rushhour.studies.knee import analyse_study, study_cell

from .helpers import summary, tier
from .test_knee import _step


def test_sweep_reports(tmp_path: Path) -> None:
    from rushhour.studies.knee import analyse_sweep

    steps = [_step(0, 0.5, 800, 0), _step(1, 1.0, 1500, 2), _step(2, 2.0, 4200, 60)]
    result = analyse_sweep(steps, sweep_id="sweep-t", scenario="<demo>", mode="steady", created_at="now")
    paths = write_sweep_reports(result, tmp_path)
    page = paths["html"].read_text()
    assert "&lt;demo&gt;" in page and "<demo>" not in page
    assert page.count("<svg") == 3 and "interactive holds its SLO" in page
    assert "| interactive |" in paths["markdown"].read_text()


def _cell(k: int, policy: str, load: str, top_p99: float, served: int = 100):
    tiers = [tier(f"t{p}", 10 * (k - p), 100, 100 - served, top_p99 / 2 if p == 0 else 500.0,
                  e2e_p99=top_p99 if p == 0 else 3000.0) for p in range(k)]
    return study_cell(summary(tiers, []), k=k, mix="uniform", load=load, policy=policy, replicas=2)


def test_study_analysis_and_report(tmp_path: Path) -> None:
    cells = []
    for load, fifo_p99 in (("moderate", 3000.0), ("saturated", 6000.0)):
        for k, gain in ((2, 1.5), (4, 2.5), (6, 2.0)):
            cells.append(_cell(k, "fifo", load, fifo_p99))
            cells.append(_cell(k, "headroom", load, fifo_p99 / (gain if load == "moderate" else 1.1)))
    result = analyse_study(cells, study_id="study-t", created_at="now", grid={"k": [2, 4, 6]})
    claims = {c.key: c for c in result.claims}
    assert result.best_k["headroom/moderate"] == 4
    assert claims["optimal_k"].agrees == "agrees"
    assert claims["top_speedup"].agrees == "agrees" and "2.50×" in claims["top_speedup"].ours
    assert claims["saturation"].agrees == "agrees"
    assert claims["cost_per_latency"].agrees in ("agrees", "partly")
    paths = write_study_reports(result, tmp_path)
    assert "Published claims" in paths["html"].read_text()
    assert "| 4 | uniform | moderate | headroom |" in render_study_markdown(result)


def test_study_verdicts_come_from_valid_cells_and_name_the_caveats() -> None:
    """Issue 12: '4 tiers optimal: agrees' rested on a slow FIFO cell at K = 4 and 17 of 26 invalid cells."""
    cells = []
    for k in (2, 4, 6, 8):
        fifo = 12000.0 if k == 4 else 3000.0  # FIFO ignores tiers: K = 4's baseline is an outlier
        cells.append(_cell(k, "fifo", "moderate", fifo))
        cells.append(_cell(k, "headroom", "moderate", 2000.0 - 150.0 * k))  # the policy's own P99 keeps falling
    cells.append(_cell(6, "headroom", "saturated", 100.0).model_copy(update={"valid": False}))
    result = analyse_study(cells, study_id="s", created_at="now", grid={"k": [2, 4, 6, 8]})
    claim = next(c for c in result.claims if c.key == "optimal_k")
    assert result.best_k["headroom/moderate"] == 4  # the speedup peaks where the baseline was slow …
    assert claim.agrees == "partly"  # … but the policy's own trend says K = 8
    assert "best own K = 8" in claim.ours
    assert "1 of 9 cells were invalid and left out" in claim.ours
    assert "outlier baseline cell(s): fifo K=4 (uniform mix, moderate load)" in claim.ours
    row = next(r for r in result.rows if r.load == "saturated")
    assert row.excluded == "invalid cell" and row.top_speedup is None
    assert any("1 of 9 cells invalid" in n for n in result.notes)
