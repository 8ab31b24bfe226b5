"""The HTML report without a browser: structure, escaping, embedded data, offline, drops.csv."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from report_fixtures import HOSTILE_ERROR, HOSTILE_REASON, write_records

from rushhour.audit import report_table
from rushhour.audit.summary import Summary
from rushhour.reports import drops, render_html, write_reports
from rushhour.reports.charts import MAX_POINTS, timeline_data
from rushhour.reports.html import script_json

DATA_RE = re.compile(r'<script type="application/json" id="rh-data">(.*?)</script>', re.S)


def embedded(html: str) -> dict:
    match = DATA_RE.search(html)
    assert match, "no embedded JSON block"
    return json.loads(match.group(1))


def test_write_reports_writes_all_files(summary: Summary, run_dir: Path) -> None:
    paths = write_reports(summary, run_dir)
    assert set(paths) == {"html", "markdown", "junit", "drops_csv"}
    for key, name in (
        ("html", "report.html"),
        ("markdown", "report.md"),
        ("junit", "junit.xml"),
        ("drops_csv", "drops.csv"),
    ):
        assert paths[key] == run_dir / name and paths[key].stat().st_size > 0
    assert not list(run_dir.glob("*.tmp"))


def test_hostile_server_text_is_escaped(summary: Summary) -> None:
    html = render_html(summary, None)
    assert "<script>alert(" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # only our own three script blocks exist
    assert html.count("<script") == 3 and html.count("</script>") == 3


def test_script_json_cannot_close_the_block() -> None:
    text = script_json({"e": "</script><script>alert(1)</script>", "amp": "a&b", "ls": "\u2028"})
    assert "</" not in text and "<" not in text and "\u2028" not in text
    assert json.loads(text)["e"] == "</script><script>alert(1)</script>"


def test_embedded_data_has_every_tier(summary: Summary) -> None:
    data = embedded(render_html(summary, None))
    assert data["tiers"] == ["interactive", "standard", "batch"]
    assert set(data["timeline"]["tiers"]) == set(data["tiers"])
    assert data["colours"]["interactive"] == "#0072B2" and data["colours"]["batch"] == "#CC79A7"
    assert data["windows"] == [[25.0, 60.0]]
    assert len(data["cdf"]["batch"]["from_send"]) == 101


def test_offline_and_uplot_inlined_once(summary: Summary) -> None:
    html = render_html(summary, None)
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "@import" not in html and "url(http" not in html
    assert html.count("var uPlot=function") == 1
    assert "Content-Security-Policy" in html


def test_verdict_sentences_and_tables(summary: Summary) -> None:
    html = render_html(summary, None)
    assert "FAIL: 2 of 6 SLO checks failed" in html
    assert "During saturation batch waited p99 48.0 s; 71 % not served" in html
    assert "interactive waited p99 2.60 s and was never dropped" in html
    assert 'id="badge">FAIL<' in html
    assert "No fallback configured" not in html
    assert "status_429: 80" in html


def test_edge_case_renders(edge: Summary) -> None:
    html = render_html(edge, None)
    assert 'id="invalid-banner"' in html and "generator loop lag p99 250 ms" in html
    assert 'id="badge">INVALID<' in html
    assert "idle sent no requests" in html
    assert "No fallback configured" in html
    assert "No saturation was detected" in html
    assert "server exposed no queue metrics" in html
    data = embedded(html)
    assert data["anchor_epoch_s"] is None and data["cdf"]["idle"] == {}


def test_drops_csv_from_records(summary: Summary, run_dir: Path) -> None:
    expected = write_records(run_dir)
    paths = write_reports(summary, run_dir, report_table(run_dir))
    rows = list(csv.DictReader(io.StringIO(paths["drops_csv"].read_text())))
    assert len(rows) == expected
    assert {r["outcome"] for r in rows} == {"queue_full", "timeout"}  # the audit's classes, never raw labels
    assert (run_dir / "attempts.parquet").exists()  # read through the audit's table
    assert any(r["error"] == HOSTILE_ERROR for r in rows)
    assert all(not r["error"].startswith("=") for r in rows)  # formula injection neutralised
    assert rows == sorted(rows, key=lambda r: float(r["t_s"]))
    assert {"request_id", "tier", "tenant", "t_s", "status", "reason", "retry_after_s", "error"} <= set(rows[0])
    html = paths["html"].read_text()
    assert 'href="drops.csv"' in html and 'href="data:text/csv;charset=utf-8;base64,' in html


def test_drops_csv_falls_back_to_evidence(summary: Summary) -> None:
    rows = drops.drop_rows(summary, None)
    assert [r["request_id"] for r in rows][:2] == ["req-b-0001", "req-s-0001"]
    assert any(r["reason"] == HOSTILE_REASON for r in rows)


def test_large_csv_is_linked_not_embedded(summary: Summary, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drops, "EMBED_LIMIT", 10)
    html = render_html(summary, None)
    assert 'href="drops.csv"' in html and "data:text/csv" not in html


def test_downsampling_keeps_tiers_and_totals(big: Summary) -> None:
    data = timeline_data(big)
    assert len(data["t"]) <= MAX_POINTS
    assert set(data["tiers"]) == {t.name for t in big.tiers}
    for name, series in data["tiers"].items():
        raw = sum(big.timeline.tiers[name].served)
        assert sum(series["served"]) * data["bucket_s"] == pytest.approx(raw, rel=1e-3)
        assert max(v for v in series["ttft_p99_ms"] if v is not None) == max(
            v for v in big.timeline.tiers[name].ttft_p99_ms if v is not None
        )


def test_tier_colours_follow_tier_order(summary: Summary) -> None:
    from rushhour.reports.fmt import TIER_PALETTE, tier_colours

    renamed = summary.model_copy(
        update={"tiers": [t.model_copy(update={"name": f"x{i}"}) for i, t in enumerate(summary.tiers)]}
    )
    assert list(tier_colours(renamed).values()) == list(TIER_PALETTE[:3])


@pytest.mark.parametrize("variant", ["no_tiers", "empty_timeline", "no_verdicts", "missing_tier_series"])
def test_degenerate_summaries_render(summary: Summary, variant: str) -> None:
    from rushhour.audit.summary import Timeline
    from rushhour.reports import render_junit, render_markdown

    empty = Timeline(bucket_s=1.0, t=[], tiers={}, breaker=[{"route": "x", "state": "open"}])
    updates: dict[str, dict[str, Any]] = {
        "no_tiers": {"tiers": [], "verdicts": [], "evidence": [], "timeline": empty},
        "empty_timeline": {"timeline": empty},
        "no_verdicts": {"verdicts": [], "passed": True, "exit_code": 0},
        "missing_tier_series": {
            "timeline": summary.timeline.model_copy(update={"tiers": {"batch": summary.timeline.tiers["batch"]}})
        },
    }
    s = summary.model_copy(update=updates[variant])
    html = render_html(s, None)
    embedded(html)
    assert render_markdown(s) and render_junit(s)


def test_unclassified_answers_are_shown_under_the_verdict(summary: Summary) -> None:
    """Issue 12: answers no rule knows are named prominently, not buried in the findings."""
    from rushhour.audit.summary import Finding

    f = Finding(kind="unclassified", severity="error", tier="batch",
                message='51 × 503 "The engine is currently busy…": no rule for profile vllm (counted as not served)')
    html = render_html(summary.model_copy(update={"findings": [f, *summary.findings]}), None)
    box = html.index('id="unclassified"')
    assert box < html.index('id="glance"'), "the box sits above the at-a-glance table"
    assert "51 × 503 &#34;The engine is currently busy…&#34;: no rule for profile vllm" in html
    assert html.count("no rule for profile vllm") == 1  # not repeated in the findings table


def test_censored_percentile_renders_as_a_bound(summary: Summary) -> None:
    batch = summary.tier("batch")
    ttft = batch.latency.ttft_ms.model_copy(update={"p99": 12200.0, "lower_bound": ["p99", "max"], "censored": 44})
    latency = batch.latency.model_copy(update={"ttft_ms": ttft})
    tiers = [t if t.name != "batch" else t.model_copy(update={"latency": latency}) for t in summary.tiers]
    html = render_html(summary.model_copy(update={"tiers": tiers}), None)
    assert "≥ 12.2 s" in html and "of which 44 censored" in html


def test_interrupted_and_inconclusive_are_said(summary: Summary) -> None:
    run = summary.run.model_copy(update={"stop_reason": "budget", "interrupted": True})
    v = summary.verdicts[0].model_copy(update={"passed": False, "inconclusive": True,
                                               "message": "interactive ttft_ms.p99: inconclusive: 1 sample(s)"})
    s = summary.model_copy(update={"run": run, "verdicts": [v], "passed": False, "exit_code": 2})
    html = render_html(s, None)
    assert "the run was interrupted (stop reason: budget)" in html
    assert 'id="badge">INCONCLUSIVE<' in html and "INCONCLUSIVE: 1 of 1 SLO checks could not be judged" in html


def test_no_server_reason_says_none_instead_of_an_empty_table(summary: Summary) -> None:
    html = render_html(summary, None)
    assert 'id="reasons"' in html and 'id="reasons-none"' not in html  # the realistic run has reasons
    quiet = summary.model_copy(update={"tiers": [t.model_copy(update={"by_reason": {}}) for t in summary.tiers]})
    html = render_html(quiet, None)
    assert 'id="reasons"' not in html and 'id="reasons-none"' in html


def test_rendering_never_reads_the_run_folder(summary: Summary, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports take results: with the table handed in, rendering neither audits nor reads the attempts table."""
    from rushhour import audit

    write_records(run_dir)
    table = report_table(run_dir)
    assert table is not None and len(table)

    def no_audit(*_: object, **__: object) -> None:
        raise AssertionError("a renderer reached into the run folder")

    monkeypatch.setattr(audit, "attempts", no_audit)
    monkeypatch.setattr(audit, "run_audit", no_audit)
    paths = write_reports(summary, run_dir, table)
    assert len(paths["drops_csv"].read_text().splitlines()) - 1 == len(drops.drop_rows(summary, table))
