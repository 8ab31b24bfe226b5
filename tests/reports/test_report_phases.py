"""The report shows the measurement window: excluded spans on the timeline, per-phase figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rushhour.audit.build import audit_run
from rushhour.reports import render_html
from rushhour.reports.markdown import render_markdown
from tests.audit.helpers import MS, RunBuilder, S

DATA_RE = re.compile(r'<script type="application/json" id="rh-data">(.*?)</script>', re.S)


def _run(tmp_path: Path) -> Path:
    tiers = [{"name": "interactive", "priority": 1, "slo": {"phases": {"peak": {"ttft_ms": {"p50": 500}}}}}]
    phases = [{"name": "warm-up", "duration": 10}, {"name": "peak", "duration": 20}]
    run = RunBuilder(tmp_path, tiers=tiers, duration_s=30.0, scenario_extra={"phases": phases})
    for i in range(10):
        t = i * S
        run.request(sent_ns=t, first_token_ns=t + 3000 * MS, last_token_ns=t + 3100 * MS, done_ns=t + 3100 * MS)
    for i in range(20):
        run.request(sent_ns=10 * S + i * S)
    return run.close()


def test_html_shades_excluded_phases_and_shows_a_per_phase_table(tmp_path: Path) -> None:
    summary = audit_run(_run(tmp_path))
    html = render_html(summary)
    match = DATA_RE.search(html)
    assert match
    assert json.loads(match.group(1))["excluded"] == [[0.0, 10.0]]
    assert 'id="measurement-window"' in html and "leave out 10 requests sent in warm-up" in html
    table = html[html.index('id="per-phase"'):]
    table = table[: table.index("</table>")]
    assert "warm-up (excluded)" in table and ">peak<" in table
    assert "3.00 s" in table or "3.0 s" in table  # warm-up TTFT p50 is shown, just not judged
    assert "peak: ttft_ms.p50" in html


def test_markdown_names_what_the_window_left_out(tmp_path: Path) -> None:
    text = render_markdown(audit_run(_run(tmp_path)))
    assert "Measurement window: 10 request(s) sent in warm-up are left out" in text
    assert "peak: ttft_ms.p50" in text


def test_terminal_and_gate_name_the_window(tmp_path: Path) -> None:
    from rich.console import Console

    from rushhour.reports.terminal import print_terminal, print_verdicts

    summary = audit_run(_run(tmp_path))
    for show in (print_terminal, print_verdicts):
        console = Console(record=True, width=200)
        show(summary, console)
        text = console.export_text()
        assert "measurement window: 10 request(s) sent in warm-up left out of the figures and SLO checks" in text
        assert "peak: ttft_ms.p50" in text
