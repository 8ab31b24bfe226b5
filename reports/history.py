"""The run history on the terminal and its page: the judgement per tier and figure, trend charts, the trend table."""

from __future__ import annotations

import math
from typing import Any

from markupsafe import Markup

from rushhour.reports import fmt
from rushhour.reports.page import colours_for, page_css, page_env
from rushhour.reports.sweep import line_chart
from rushhour.studies.between import FIGURES, Figure, change_text, value_text
from rushhour.studies.history import FigureJudgement, HistoryResult

SHOWN_VALUES = 8  # window values listed per figure on the terminal and the page (the newest ones)
_FIGURE = {f.key: f for f in FIGURES}


def _value(row: dict[str, Any], key: str, scale: float) -> float | None:
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value) * scale


def history_charts(rows: list[dict[str, Any]], tiers: list[str], colours: dict[str, str]) -> list[Markup]:
    """Not served (%), TTFT p50 and TTFT p99 (s) against the run's place in the history, one line per tier."""

    def series(key: str, scale: float) -> list[Any]:
        return [(name, colours[name],
                 [(float(r["run_index"]), _value(r, key, scale)) for r in rows if r["tier"] == name])
                for name in tiers]

    return [
        line_chart(series("drop_rate", 100.0), x_label="run (oldest → newest)", y_label="not served (%)",
                   y_fmt="{:.0f}", title="not served per run"),
        line_chart(series("ttft_p50_ms", 0.001), x_label="run (oldest → newest)", y_label="TTFT p50 (s)",
                   y_fmt="{:.2f}", title="TTFT p50 per run"),
        line_chart(series("ttft_p99_ms", 0.001), x_label="run (oldest → newest)", y_label="TTFT p99 (s)",
                   y_fmt="{:.2f}", title="TTFT p99 per run"),
    ]


def method_text(result: HistoryResult) -> str:
    """How the newest run was judged, in words."""
    rule = result.rule
    floor = rule.get("min_latency_ms")
    floor_text = f" and +{floor:g} ms" if floor else ""
    minimum = (f"{change_text(_FIGURE['ttft_p99_ms'], rule.get('min_change'))}{floor_text} latency, "
               f"{change_text(_FIGURE['drop_rate'], rule.get('min_drop_change'))} not served")
    if result.method == "between-run":
        return (f"a figure regresses when it lies above the window's run-to-run spread (95 % prediction interval), "
                f"the within-run test calls it significant, and it is worse by more than {minimum}")
    if result.method == "within-run":
        return (f"compare's within-run test alone (fewer than {int(rule.get('min_runs', 3))} runs in the window: "
                f"no run-to-run spread); worse by more than {minimum}")
    return ""


def verdict_text(result: HistoryResult) -> str:
    """'no regression …', 'REGRESSION: …' or why nothing could be judged."""
    if result.exit_code == 0:
        return f"no regression of {result.newest} against the {len(result.window)} run(s) before it"
    if result.exit_code == 1:
        return f"REGRESSION of {result.newest}: {len(result.regressions)} finding(s)"
    newest = next((n for n in result.notes if n.startswith("the newest run by ")), None)
    if newest:  # a broken or out-of-order newest run: the run judged was not the newest
        return f"not judged: {newest}"
    reason = next((n for n in result.notes if "nothing to compare" in n or "did not end on schedule" in n), None)
    if result.comparison is not None and result.comparison.verdict == "invalid":
        reason = "the newest run is invalid: " + "; ".join(result.comparison.candidate.reasons)
    return f"not judged: {reason or 'see the notes'}"


def window_values_text(j: FigureJudgement) -> str:
    """The window runs' values, oldest first ('–' for a run without one); the newest few when there are many."""
    fig = _FIGURE[j.figure]
    shown = j.window_values[-SHOWN_VALUES:]
    head = "… " if len(j.window_values) > len(shown) else ""
    return head + ", ".join(value_text(fig, v) for v in shown)


def interval_cell(j: FigureJudgement) -> str:
    """The prediction interval, or why there is none."""
    fig: Figure = _FIGURE[j.figure]
    if j.high is None:
        return "none: " + (j.interval_note or "too few runs")
    return f"{value_text(fig, j.low)} … {value_text(fig, j.high)}"


def flagged_cell(j: FigureJudgement) -> str:
    """Which tests said worse: 'between-run, within-run', or '–'."""
    return ", ".join(j.flagged_by) or "–"


def verdict_cell(j: FigureJudgement) -> str:
    """REGRESSION, ok, or 'ok (within-run only)'."""
    word = "REGRESSION" if j.regression else "ok"
    return word if j.mode == "between-run" else f"{word} (within-run only)"


JUDGEMENT_HEADER = ("tier", "figure", "window runs (oldest first)", "95 % prediction interval", "newest",
                    "change", "flagged by", "verdict")


def judgement_rows(result: HistoryResult) -> list[tuple[str, ...]]:
    """The judgement table's cells, one row per tier and figure."""
    return [(j.tier, j.label, window_values_text(j), interval_cell(j), value_text(_FIGURE[j.figure], j.newest),
             change_text(_FIGURE[j.figure], j.change), flagged_cell(j), verdict_cell(j)) for j in result.judgements]


def print_history(result: HistoryResult, rows: list[dict[str, Any]], console: Any) -> None:
    """The terminal: the newest run's tiers, the judgement table, the verdict, its findings and notes."""
    from rich.table import Table

    last = max(r["run_index"] for r in rows) if rows else 0
    newest = [r for r in rows if r["run_index"] == last]
    if newest:  # the per-tier lines below say which run they describe
        console.print(f"newest run {newest[0]['run_id']} ({newest[0]['scenario']}):", highlight=False, markup=False)
    for row in newest:
        p99 = _value(row, "ttft_p99_ms", 1.0)
        console.print(f"  {row['tier']}: not served {fmt.pct(_value(row, 'drop_rate', 1.0))}, TTFT p99 "
                      f"{fmt.ms(p99)}, {'pass' if row['tier_passed'] else 'fail'}", highlight=False, markup=False)
    if result.judgements:
        table = Table(title=f"newest run {result.newest} against {len(result.window)} run(s) before it",
                      expand=False)
        for i, name in enumerate(JUDGEMENT_HEADER):
            table.add_column(name, justify="right" if i in (4, 5) else "left")
        for cells in judgement_rows(result):
            table.add_row(*cells)
        console.print(table)
    console.print(f"{result.runs} runs; {verdict_text(result)}", highlight=False, markup=False)
    if result.method:
        console.print(f"  rule: {method_text(result)}", highlight=False, markup=False)
    for line in [*result.regressions, *result.notes]:
        console.print(f"  {line}", highlight=False, markup=False)


def render_history_html(result: HistoryResult, rows: list[dict[str, Any]]) -> str:
    """``history.html``: one self-contained page (inline CSS and SVG, no script)."""
    tiers = list(dict.fromkeys(r["tier"] for r in rows))
    colours = colours_for(tiers)
    clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]
    return str(page_env().get_template("history.html.j2").render(
        result=result, rows=clean, tiers=tiers, colours=colours, charts=history_charts(clean, tiers, colours),
        css=Markup(page_css()), verdict=verdict_text(result), scenarios=result.scenarios, method=method_text(result),
        header=JUDGEMENT_HEADER, judgements=list(zip(result.judgements, judgement_rows(result), strict=True)),
    ))
