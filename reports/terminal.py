"""The rich end-of-run summary and the gate's verdict table."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from rushhour.audit.judged import tier_state
from rushhour.audit.summary import Summary, Verdict
from rushhour.reports import control, fmt, inconclusive, limit, sentences, waits


def _verdict_cell(summary: Summary, tier: str) -> Text:
    """'PASS', 'FAIL 1/2', 'INCONCLUSIVE 1/2' (why: a line under the table), 'NOT JUDGED' or '–' for a tier."""
    state = tier_state(summary.verdicts, tier)
    style = {"none": "dim", "fail": "bold red", "inconclusive": "bold yellow", "pass": "bold green",
             "not_judged": "yellow" if state.allowed else "bold yellow"}[state.state]
    return Text(fmt.tier_label(state, unsure_word=inconclusive.CELL), style=style)


def _banner(summary: Summary) -> Text:
    """The one-line verdict, coloured."""
    if not summary.validity.valid:
        style = "bold white on red"
    elif summary.passed:
        style = "bold green"
    else:
        style = "bold yellow" if summary.exit_code == 2 else "bold red"
    return Text(sentences.verdict_line(summary), style=style)


def tier_table(summary: Summary) -> Table:
    """Per-tier table: requests, served, not served (%), 429, 503, TTFT p50/p99, verdict."""
    colours = fmt.tier_colours(summary)
    table = Table(title=f"rushhour · {summary.run.scenario} · {summary.run.run_id} · TTFT p50/p99",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    # short headers and no_wrap: an 80-column CI log must still show whole tier names and numbers
    longest = max((len(t.name) for t in summary.tiers), default=4)
    table.add_column("tier", no_wrap=True, min_width=min(longest, 24))
    for name in ("sent", "served", "not served", "429", "503", "p50", "p99"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("SLO", no_wrap=True)
    for t in summary.tiers:
        unserved = fmt.unserved_count(t.by_class)
        table.add_row(
            Text(t.name, style=f"bold {colours[t.name]}"),
            fmt.count(t.requests),
            fmt.count(t.by_class.get("served", 0)),
            f"{fmt.count(unserved)} ({fmt.pct(t.drop_rate.value)})" if t.requests else "–",
            fmt.count(t.by_status.get("429", 0)),
            fmt.count(t.by_status.get("503", 0)),
            fmt.pctl_text(t.latency.ttft_ms, "p50"),
            fmt.pctl_text(t.latency.ttft_ms, "p99"),
            _verdict_cell(summary, t.name),
        )
    return table


def verdict_table(summary: Summary, wide: bool = True) -> Table:
    """One row per SLO check; the 'why' column only when the console is wide."""
    table = Table(title="SLO checks", title_justify="left")
    table.add_column("tier", no_wrap=True)
    table.add_column("check", no_wrap=True)
    for name in ("threshold", "observed", "bound"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True)
    if wide:
        table.add_column("why", overflow="fold")
    for v in summary.verdicts:
        cells: list[str | Text] = [
            v.tier,
            v.check,
            fmt.check_value(v.check, v.threshold),
            fmt.check_value(v.check, v.observed),
            fmt.check_value(v.check, v.bound) if v.judge == "bound" else "point",
            _result(v),
        ]
        if wide:
            cells.append(Text(v.message))
        table.add_row(*cells)
    return table


def _result(v: Verdict) -> Text:
    word = fmt.verdict_result(v)
    style = {"PASS": "bold green", "FAIL": "bold red", "VACUOUS": "dim"}.get(word, "bold yellow")
    return Text(word, style=style)


def _unclassified(summary: Summary, console: Console) -> None:
    """Answers no rule knows, right under the verdict: they are why a tier counts as not served."""
    for line in sentences.unclassified_lines(summary):
        console.print(Text("unclassified: " + line, style="bold red"), highlight=False)


def _window(summary: Summary, console: Console) -> None:
    """One line naming what the measurement window left out (warm-up, cool-down, measure: false)."""
    m = summary.measurement
    if m.excluded_phases:
        console.print(Text(f"measurement window: {m.excluded_requests:,} request(s) sent in "
                           f"{', '.join(m.excluded_phases)} left out of the figures and SLO checks"),
                      highlight=False)


def _unsure(summary: Summary, console: Console) -> None:
    """Why each inconclusive check could not be judged, in words (the table's cell only says that it could not)."""
    for line in inconclusive.lines(summary):
        console.print(Text(line, style="yellow"), highlight=False)


def print_terminal(summary: Summary, console: Console) -> None:
    """The end-of-run summary: verdict line, the story in sentences, the per-tier table, findings."""
    console.print(_banner(summary))
    for line in sentences.headline(summary)[1:]:
        console.print(Text("  • " + line), highlight=False)
    console.print(tier_table(summary))
    rates = [(t.name, t.output_tokens_per_s) for t in summary.tiers if t.output_tokens_per_s is not None]
    if rates:
        total = sum(r for _, r in rates)
        console.print(Text("output tokens/s: " + ", ".join(f"{n} {r:,.1f}" for n, r in rates)
                           + f"; run {total:,.1f}"), highlight=False)
    for t in summary.tiers:
        if t.latency.tpot_ms.n or t.latency.itl_ms is not None:
            console.print(Text(f"decode, {t.name}: {fmt.decode_line(t.latency)}"), highlight=False)
    until = summary.run.until
    if isinstance(until, dict):
        console.print(Text("--until: " + str(until.get("message") or "-")[:300]), highlight=False)
    answer = limit.found(summary)
    if answer is not None:
        for line in limit.lines(answer):
            console.print(Text("find-limit: " + line), highlight=False)
        steps = Table(title="find-limit: the levels tried")
        for col in limit.STEPS_HEADER:
            steps.add_column(col)
        for row in limit.step_rows(answer):
            steps.add_row(*row)
        console.print(steps)
    _unsure(summary, console)
    _window(summary, console)
    for line in control.lines(summary):
        console.print(Text("priority vs equal-priority control: " + line), highlight=False)
    for line in sentences.agents_lines(summary):
        console.print(Text("agents on the wire: " + line), highlight=False)
    for tier in summary.waits:
        console.print(Text("where it waited: " + waits.sentence(tier)), highlight=False)
    for line in waits.check_lines(summary):
        console.print(Text("server timing check: " + line), highlight=False)
    if summary.verdicts:
        console.print(verdict_table(summary, wide=console.width >= 120))
    for f in summary.findings:
        style = {"error": "red", "warning": "yellow"}.get(f.severity, "cyan")
        console.print(f"[{style}]{f.severity}[/] {escape(f.kind)}: {escape(f.message)}", highlight=False)


def print_verdicts(summary: Summary, console: Console) -> None:
    """The gate's output: the verdict table and the one-line verdict."""
    if not summary.validity.valid:
        for reason in summary.validity.reasons:
            console.print(Text("invalid: " + reason, style="red"), highlight=False)
    for warning in summary.validity.warnings if summary.validity.valid else []:
        console.print(Text("warning: " + warning, style="yellow"), highlight=False)
    if summary.validity.cause:
        console.print(Text(summary.validity.cause, style="red" if not summary.validity.valid else "yellow"),
                      highlight=False)
    cut = sentences.interrupted_text(summary)
    if cut:
        console.print(Text(cut[0].upper() + cut[1:], style="yellow"), highlight=False)
    _unclassified(summary, console)
    _window(summary, console)
    if summary.verdicts:
        console.print(verdict_table(summary, wide=console.width >= 120))
        _unsure(summary, console)
    else:
        console.print("No SLO checks configured.")
    console.print(_banner(summary))
