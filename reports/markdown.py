"""Markdown for ``$GITHUB_STEP_SUMMARY`` and PR comments: verdicts, per-tier table, findings."""

from __future__ import annotations

import html

from rushhour.audit.summary import Summary, TokenFidelity
from rushhour.reports import control, fmt, inconclusive, limit, sentences, sidebyside, waits

_SEVERITY = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def _cell(text: object) -> str:
    """A table cell: HTML-escaped (GitHub renders inline HTML), pipes and newlines neutralised."""
    value = html.escape(str(text), quote=False)
    return value.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _text(text: str) -> str:
    """Running text: HTML-escaped so that server-supplied strings cannot inject markup."""
    return html.escape(text, quote=False).replace("\n", " ")


def md_table(header: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    """A GitHub-flavoured Markdown table."""
    right = right or set()
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


_BADGE = {"INVALID": "⚠️ INVALID RUN", "PASS": "✅ PASS", "FAIL": "❌ FAIL", "NO SLOs": "❔ NO SLOs",
          "INCONCLUSIVE": "❔ INCONCLUSIVE", "NOT JUDGED": "❔ NOT JUDGED"}


def _status_badge(summary: Summary) -> str:
    """'✅ PASS', '❌ FAIL', '❔ INCONCLUSIVE', '❔ NOT JUDGED', '❔ NO SLOs' or '⚠️ INVALID RUN'."""
    return _BADGE[sentences.gate_word(summary)]


def _token_line(f: TokenFidelity) -> str:
    """Prompt tokens reported − intended and output served vs asked, in one line (served attempts)."""
    parts = []
    if f.prompt_n and f.prompt_diff_median is not None and f.prompt_diff_p99 is not None:
        basis = "intended from the scenario's tokenizer" if f.prompt_exact_basis else "intended is an estimate"
        parts.append(f"prompt tokens reported − intended: median {f.prompt_diff_median:+.0f}, "
                     f"p99 |Δ| {f.prompt_diff_p99:.0f}, {fmt.pct(f.prompt_share_exact)} exact "
                     f"over {fmt.count(f.prompt_n)} ({basis})")
    if f.output_n and f.output_ratio_median is not None:
        parts.append(f"output = max_tokens for {fmt.pct(f.output_share_equal)} (median output/asked "
                     f"{f.output_ratio_median:.2f}, {fmt.pct(f.output_pinned_share)} pinned)")
    return "; ".join(parts)


SIMULATED = "simulated (virtual time)"
_RESULT = {"PASS": "✅ pass", "FAIL": "❌ FAIL", "INCONCLUSIVE": "❔ inconclusive", "VACUOUS": "➖ vacuous",
           "NOT JUDGED": "❔ NOT JUDGED"}


def render_markdown(summary: Summary) -> str:
    """The Markdown summary as text (ends with a newline; append-safe)."""
    run = summary.run
    out = [f"## rushhour · {_text(run.scenario)} · {_status_badge(summary)}", ""]
    if run.mode == "simulated":
        out += [f"> **{SIMULATED}**: the scenario ran against the testbed's model of the stack, not a live one.",
                f"> {_text(sentences.preset_line(summary))}", ""]
    out += [f"**{_text(sentences.verdict_line(summary))}**", ""]
    if not summary.validity.valid:
        out += [
            "> [!CAUTION]",
            "> This run is invalid; its latency and drop figures are not evidence about the server:",
        ]
        out += [f"> - {_text(r)}" for r in summary.validity.reasons]
        out += ([f"> - {_text(summary.validity.cause)}"] if summary.validity.cause else []) + [""]
    elif summary.validity.warnings:
        out += ["> [!WARNING]", "> The generator lagged, but moved no recorded time beyond the tolerances (valid):"]
        out += [f"> - {_text(w)}" for w in summary.validity.warnings]
        out += ([f"> - {_text(summary.validity.cause)}"] if summary.validity.cause else []) + [""]
    story = sentences.headline(summary)[1:]
    out += [f"- {_text(line)}" for line in story] + [""]
    answer = limit.found(summary)
    if answer is not None:
        out += ["### The limit (find-limit)", ""] + [f"- {_text(line)}" for line in limit.lines(answer)] + [""]
        out += [*md_table(limit.STEPS_HEADER, limit.step_rows(answer), {2, 3, 7}), ""]

    out += ["### SLO checks", ""]
    if summary.verdicts:
        rows = [
            [
                v.tier,
                v.check,
                fmt.check_value(v.check, v.threshold),
                fmt.check_value(v.check, v.observed),
                fmt.check_value(v.check, v.bound) if v.judge == "bound" else "point",
                _RESULT[fmt.verdict_result(v)],
                inconclusive.reason(summary, v) if v.inconclusive else v.message,
            ]
            for v in summary.verdicts
        ]
        out += md_table(["tier", "check", "threshold", "observed", "95 % bound", "result", "why"], rows, {2, 3, 4})
    else:
        out.append("No SLOs configured.")
    out.append("")

    out += ["### Per tier: not served and latency", ""]
    rows = []
    for t in summary.tiers:
        rows.append(
            [
                t.name,
                str(t.priority),
                fmt.count(t.requests),
                fmt.count(t.by_class.get("served", 0)),
                f"{fmt.count(t.unserved)} · {fmt.rate_ci(t.drop_rate)}",
                fmt.pct(t.policy_drop_rate.value),
                fmt.count(t.by_status.get("429", 0)),
                fmt.count(t.by_status.get("503", 0)),
                fmt.pctl_text(t.latency.ttft_ms, "p50"),
                fmt.pctl_text(t.latency.ttft_ms, "p99"),
                fmt.pctl_text(t.latency.ttft_from_intended_ms, "p99"),
            ]
        )
    out += md_table(
        [
            "tier",
            "priority",
            "requests",
            "served",
            "not served [95 % CI]",
            "policy drops",
            "429",
            "503",
            "TTFT p50",
            "TTFT p99",
            "p99 from intended",
        ],
        rows,
        set(range(1, 11)),
    )
    out.append("")
    m = summary.measurement
    if m.excluded_phases:
        out += [f"Measurement window: {fmt.count(m.excluded_requests)} request(s) sent in "
                f"{_text(', '.join(m.excluded_phases))} are left out of the figures and SLO checks above.", ""]

    if sidebyside.shown(summary):
        header, rows = sidebyside.comparison_rows(summary)
        out += ["### Service tiers side by side", "", *md_table(header, rows, set(range(1, len(header)))), ""]
    if sidebyside.spend_shown(summary) and summary.spend is not None:
        out += ["### Tokens, spend and budget", ""]
        out += md_table(sidebyside.SPEND_HEADER, sidebyside.spend_rows(summary), {2, 3})
        out += [""] + [f"- {_text(n)}" for n in summary.spend.notes] + [""]

    decode = [f"- **{_text(t.name)}**: {_text(fmt.decode_line(t.latency))}" for t in summary.tiers
              if t.latency.tpot_ms.n or t.latency.itl_ms is not None]
    if decode:
        out += ["### Decode speed: per-request TPOT beside pooled inter-token latency", "", *decode, ""]
    token_lines = [f"- **{_text(t.name)}**: {_text(_token_line(t.tokens))}" for t in summary.tiers if t.tokens]
    if token_lines:
        out += ["### Token counts: the server's against the scenario's", "", *token_lines, ""]

    agent_lines = sentences.agents_lines(summary)
    if agent_lines:
        out += ["### Agents on the wire: tools and sub-agents", "", *[f"- {_text(line)}" for line in agent_lines], ""]

    if summary.waits:  # the servers' own timing: where each tier's wait went
        out += ["### Where each tier waited (intended send → first token)", "", waits.CAPTION, ""]
        head = waits.header(summary)
        out += md_table(head, waits.rows(summary), set(range(1, len(head))))
        out += [""] + [f"- {_text(line)}" for line in waits.lines(summary)] + [""]
        if summary.waits_by_phase:
            out += ["#### Per phase", ""]
            head = waits.header(summary, by_phase=True)
            out += md_table(head, waits.rows(summary, by_phase=True), set(range(2, len(head))))
            out += [""]

    effect_rows = control.rows(summary)
    if effect_rows:
        out += ["### Did priority do anything? (equal-priority control)", ""]
        table = []
        for r in effect_rows:
            cells = [str(r["tier"]), str(r["pairs"])]
            for key in ("ttft", "wait", "drops"):
                e = r[key]
                assert isinstance(e, dict)
                cells.append(f"{e['tier']} vs {e['control']} ({e['change']}, p {e['p']})")
            table.append(cells)
        out += md_table(["tier", "pairs", "TTFT p50 tier vs control", "wait p50", "not served"], table, {1})
        out += [""] + [f"- {_text(str(r['message']))}" for r in effect_rows] + [""]

    if summary.findings:
        out += ["### Findings", ""]
        for f in summary.findings:
            where = f" **{_text(f.tier)}**" if f.tier else ""
            out.append(f"- {_SEVERITY.get(f.severity, '•')}{where} `{_text(f.kind)}`: {_text(f.message)}")
        out.append("")

    out.append(
        f"<sub>run `{_text(run.run_id)}` · {_text(run.target)} ({_text(run.profile)}) · "
        f"started {_text(run.started_at)} · {fmt.secs(run.duration_s)} · seed {run.seed} · "
        f"full report: `rushhour report` writes report.html beside summary.json</sub>"
    )
    return "\n".join(out) + "\n"
