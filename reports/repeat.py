"""A repeat's report (``rushhour run --repeat N``): per tier across runs, as Markdown and on the terminal."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from rushhour.reports import fmt
from rushhour.reports.charts import nice_ticks, tick_label
from rushhour.reports.markdown import md_table
from rushhour.reports.page import colours_for, page_css, page_env
from rushhour.reports.sweep import CHART_H, CHART_W, PAD_B, PAD_L, PAD_R, PAD_T
from rushhour.studies.repeat import RepeatSummary, Spread

REPEAT_HTML = "repeat.html"


def _ms(s: Spread) -> str:
    if s.mean is None:
        return "–"
    if s.low is None or s.high is None:
        return fmt.ms(s.mean)
    return f"{fmt.ms(s.mean)} [{fmt.ms(s.low)}–{fmt.ms(s.high)}]"


def _pct(s: Spread) -> str:
    if s.mean is None:
        return "–"
    if s.low is None or s.high is None:
        return fmt.pct(s.mean, 1)
    return f"{fmt.pct(s.mean, 1)} [{fmt.pct(s.low, 1)}–{fmt.pct(s.high, 1)}]"


def verdict_line(r: RepeatSummary) -> str:
    """One line: how many runs passed, the aggregate's verdict, and the exit code under ``gate_on``."""
    passed = sum(1 for run in r.runs if run.passed)
    checks = [c for t in r.tiers for c in t.checks]
    failed = [f"{t.name} {c.check}" for t in r.tiers for c in t.checks if not c.passed]
    agg = ("no aggregate SLO check" if not checks else
           "aggregate PASS" if r.aggregate_passed else f"aggregate FAIL ({', '.join(failed)})")
    head = "PASS" if r.exit_code == 0 else "FAIL" if r.exit_code == 1 else "NOT JUDGED / INVALID"
    return f"{head}: {passed} of {len(r.runs)} runs passed; {agg}; gate on {r.gate_on} → exit {r.exit_code}"


def rows(r: RepeatSummary) -> list[list[str]]:
    """Per tier: runs passed, not served, TTFT p50 and p99 (mean over runs [95 % t-interval])."""
    return [[t.name, f"{t.runs_passed}/{t.runs}", _pct(t.drop_rate), _ms(t.ttft_p50_ms), _ms(t.ttft_p99_ms)]
            for t in r.tiers]


HEADER = ["tier", "runs passed", "not served (mean [95 % CI])", "TTFT p50", "TTFT p99"]


def render_markdown(r: RepeatSummary) -> str:
    """``repeat.md``: the verdict, the per-tier table, the aggregate checks and each run."""
    lines = [f"## rushhour · {r.scenario} · {len(r.runs)} repeated runs", "", f"**{verdict_line(r)}**", ""]
    lines += md_table(HEADER, rows(r), right={1, 2, 3, 4})
    lines += ["", f"Intervals: {r.interval}.", ""]
    checks = [c for t in r.tiers for c in t.checks]
    if checks:
        lines += ["### Aggregate SLO checks", ""]
        lines += md_table(["check", "result", "why"], [[c.check, "PASS" if c.passed else "FAIL", c.message]
                                                     for c in checks])
        lines.append("")
    lines += ["### Runs", ""]
    lines += md_table(["#", "seed", "run", "exit", "stop reason"],
                    [[str(x.index), str(x.seed), x.run_id, str(x.exit_code), x.stop_reason] for x in r.runs],
                    right={0, 1, 3})
    return "\n".join(lines) + "\n"


def print_repeat(r: RepeatSummary, console: Any) -> None:
    """The same on the terminal."""
    from rich.table import Table

    table = Table(title=f"rushhour · {r.scenario} · {len(r.runs)} repeated runs", expand=False)
    for i, name in enumerate(HEADER):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows(r):
        table.add_row(*row)
    console.print(table)
    for tier in r.tiers:
        for c in tier.checks:
            console.print(f"  {'PASS' if c.passed else 'FAIL'}  {c.message}", highlight=False, markup=False)
    console.print(verdict_line(r), highlight=False, markup=False)


def render_junit(r: RepeatSummary) -> str:
    """JUnit XML: a suite ``rushhour.runs`` (one case per run: its gate) and ``rushhour.aggregate`` (one per check)."""
    import xml.etree.ElementTree as ET

    from rushhour.reports.junit import xml_safe

    root = ET.Element("testsuites", {"name": xml_safe(f"rushhour {r.scenario} repeat of {len(r.runs)}")})
    runs = ET.SubElement(root, "testsuite", {"name": "rushhour.runs"})
    for run in r.runs:
        case = ET.SubElement(runs, "testcase", {"name": f"run {run.index} (seed {run.seed})",
                                                "classname": "rushhour.runs", "time": "0"})
        if run.exit_code != 0:
            kind = "failure" if run.exit_code == 1 else "error"
            ET.SubElement(case, kind, {"message": xml_safe(f"{run.run_id}: exit {run.exit_code} "
                                                         f"(stop reason {run.stop_reason})"), "type": "run"})
    agg = ET.SubElement(root, "testsuite", {"name": "rushhour.aggregate"})
    for tier in r.tiers:
        for check in tier.checks:
            case = ET.SubElement(agg, "testcase", {"name": xml_safe(f"{tier.name} {check.check}"),
                                                   "classname": "rushhour.aggregate", "time": "0"})
            if not check.passed:
                ET.SubElement(case, "failure", {"message": xml_safe(check.message), "type": "slo"})
    for suite in (runs, agg):
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --------------------------------------------------------------------------- the HTML page

Band = tuple[str, str, Spread]  # (tier, colour, the figure across runs)


def band_chart(bands: Sequence[Band], *, scale: float, y_label: str, title: str, show: Callable[[float], str],
               y_top: float | None = None) -> Markup:
    """Each tier's runs as dots against the run number, its mean as a line and the 95 % t-interval as a band.

    ``scale`` turns a stored value into the axis' unit (ms → s, share → %); ``show`` formats a stored value
    for the tooltips. Static SVG: the page needs no script.
    """
    runs = max((len(s.values) for _, _, s in bands), default=0)
    ys = [v * scale for _, _, s in bands for v in (*s.values, s.low, s.high) if v is not None]
    if not runs or not ys:
        return Markup('<p class="muted small">no data</p>')
    top = y_top if y_top is not None and max(ys) <= y_top else max(max(ys) * 1.05, 1e-9)
    y_ticks = nice_ticks(top)
    iw, ih = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B

    def px(run: float) -> float:  # runs 1..n spread over the width, half a slot of margin each side
        return PAD_L + (run - 0.5) / runs * iw

    def py(y: float) -> float:
        return PAD_T + ih - (y / y_ticks[-1]) * ih

    parts = [f'<svg class="rh-chart" viewBox="0 0 {CHART_W} {CHART_H}" width="{CHART_W}" height="{CHART_H}" '
             f'role="img" aria-label="{escape(title)}">']
    for tick in y_ticks:
        parts.append(f'<line x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{py(tick):.1f}" y2="{py(tick):.1f}" '
                     f'stroke="#e5e7eb"/><text x="{PAD_L - 6}" y="{py(tick) + 4:.1f}" text-anchor="end" '
                     f'font-size="10" fill="#5b6474">{escape(tick_label(tick, y_ticks))}</text>')
    for run in range(1, runs + 1):
        parts.append(f'<text x="{px(run):.1f}" y="{CHART_H - PAD_B + 14}" text-anchor="middle" font-size="10" '
                     f'fill="#5b6474">{run}</text>')
    parts.append(f'<text x="{PAD_L + iw / 2:.1f}" y="{CHART_H - 6}" text-anchor="middle" font-size="11" '
                 f'fill="#1d2330">run</text>')
    parts.append(f'<text x="12" y="{PAD_T + ih / 2:.1f}" transform="rotate(-90 12 {PAD_T + ih / 2:.1f})" '
                 f'text-anchor="middle" font-size="11" fill="#1d2330">{escape(y_label)}</text>')
    for tier, colour, s in bands:
        if s.low is not None and s.high is not None:
            top_y, bottom_y = py(s.high * scale), py(s.low * scale)
            parts.append(f'<rect class="band" x="{PAD_L}" y="{top_y:.1f}" width="{iw}" '
                         f'height="{max(bottom_y - top_y, 1.0):.1f}" fill="{colour}" fill-opacity="0.15">'
                         f'<title>{escape(tier)}: 95 % interval {escape(show(s.low))} – {escape(show(s.high))}'
                         f'</title></rect>')
        if s.mean is not None:
            parts.append(f'<line class="mean" x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{py(s.mean * scale):.1f}" '
                         f'y2="{py(s.mean * scale):.1f}" stroke="{colour}" stroke-dasharray="5 3">'
                         f'<title>{escape(tier)}: mean {escape(show(s.mean))}</title></line>')
        for run, value in enumerate(s.values, start=1):
            if value is not None:
                parts.append(f'<circle cx="{px(run):.1f}" cy="{py(value * scale):.1f}" r="4" fill="{colour}">'
                             f'<title>{escape(tier)} run {run}: {escape(show(value))}</title></circle>')
    parts.append(f'<rect x="{PAD_L}" y="{PAD_T}" width="{iw}" height="{ih}" fill="none" stroke="#dde1e8"/></svg>')
    return Markup("".join(parts))


def repeat_charts(r: RepeatSummary, colours: dict[str, str]) -> list[Markup]:
    """Not served, TTFT p50 and TTFT p99: every run, the mean and its interval, one band per tier."""
    return [
        band_chart([(t.name, colours[t.name], t.drop_rate) for t in r.tiers], scale=100.0, y_top=100.0,
                   y_label="not served (%)", title="not served per run", show=lambda v: fmt.pct(v, 1)),
        band_chart([(t.name, colours[t.name], t.ttft_p50_ms) for t in r.tiers], scale=0.001,
                   y_label="TTFT p50 (s)", title="TTFT p50 per run", show=fmt.ms),
        band_chart([(t.name, colours[t.name], t.ttft_p99_ms) for t in r.tiers], scale=0.001,
                   y_label="TTFT p99 (s)", title="TTFT p99 per run", show=fmt.ms),
    ]


def _nth(s: Spread, i: int) -> float | None:
    return s.values[i] if i < len(s.values) else None


def per_run_rows(r: RepeatSummary) -> list[dict[str, Any]]:
    """One row per tier and run: the run's own figures beside the run's facts."""
    return [{"tier": t.name, "run": run, "drop_rate": _nth(t.drop_rate, i), "ttft_p50_ms": _nth(t.ttft_p50_ms, i),
             "ttft_p99_ms": _nth(t.ttft_p99_ms, i), "passed": t.passed[i] if i < len(t.passed) else None}
            for t in r.tiers for i, run in enumerate(r.runs)]


def render_repeat_html(r: RepeatSummary, folder: Path | None = None) -> str:
    """``repeat.html``: one self-contained page (inline CSS and SVG, no script); runs link to their reports."""
    tiers = [t.name for t in r.tiers]
    colours = colours_for(tiers)
    reports = {run.folder for run in r.runs if folder is not None and (folder / run.folder / "report.html").is_file()}
    return str(page_env().get_template("repeat.html.j2").render(
        r=r, css=Markup(page_css()), colours=colours, tiers=tiers, charts=repeat_charts(r, colours),
        verdict=verdict_line(r), rows=rows(r), header=HEADER, per_run=per_run_rows(r), reports=reports,
    ))
