"""The self-contained HTML report: jinja2 (autoescaped) + uPlot inlined once + static SVG bars."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup

from rushhour.audit.judged import tier_state
from rushhour.audit.summary import UNSERVED_CLASSES, Percentiles, Summary, TierSummary
from rushhour.reports import charts, control, drops, fmt, limit, sentences, sidebyside, waits

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
VENDOR = HERE / "vendor" / "uplot"

# Per-tier rows shown in the tenant table; the rest stay in summary.json.
MAX_TENANT_ROWS = 50
# Evidence rows shown per tier; drops.csv holds them all.
MAX_EVIDENCE_ROWS = 10
FAIRNESS_KINDS = ("inversion", "starvation", "floor")


@cache
def environment() -> jinja2.Environment:
    """The template environment: autoescaping on for every template, undefined names are errors."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    for name in (
        "ms",
        "secs",
        "pct",
        "rate_ci",
        "pctl_text",
        "times",
        "count",
        "class_label",
        "class_colour",
        "check_value",
        "verdict_result",
    ):
        env.filters[name] = getattr(fmt, name)
    return env


@cache
def inline_asset(path: Path) -> str:
    """A vendored or template asset; refuses anything that would close an inline <script>/<style>."""
    text = path.read_text(encoding="utf-8")
    if "</script" in text.lower() or "</style" in text.lower():
        raise ValueError(f"{path} cannot be inlined safely")
    return text


def script_json(data: Any) -> str:
    """JSON safe inside <script type="application/json">: no '<', '>', '&' or line separators survive."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _class_columns(summary: Summary) -> list[str]:
    """Outcome classes seen in any tier, in taxonomy order."""
    seen: dict[str, int] = {}
    for tier in summary.tiers:
        for cls, value in tier.by_class.items():
            seen[cls] = seen.get(cls, 0) + value
    return fmt.ordered_classes(seen)


def _statuses(summary: Summary) -> list[str]:
    """Raw HTTP statuses seen in any tier, numerically sorted."""
    codes = {code for tier in summary.tiers for code in tier.by_status}
    return sorted(codes, key=lambda c: (not c.isdigit(), int(c) if c.isdigit() else 0, c))


def _tier_row(summary: Summary, tier: TierSummary) -> dict[str, Any]:
    """The at-a-glance row of a tier."""
    state = tier_state(summary.verdicts, tier.name)
    served = tier.by_class.get("served", 0)
    return {
        "tier": tier,
        "served": served,
        "served_share": served / tier.requests if tier.requests else None,
        "unserved": fmt.unserved_count(tier.by_class),
        "policy": fmt.policy_drop_count(tier.by_class),
        "s429": tier.by_status.get("429", 0),
        "s503": tier.by_status.get("503", 0),
        "verdicts": state.checks,
        "failed": state.failed,
        "unsure": state.unsure,
        "vacuous": state.vacuous,
        "state": state.state,
        "label": fmt.tier_label(state),
    }


def _tenants(tier: TierSummary) -> dict[str, Any]:
    """Tenant rows, worst drop rate first, capped at ``MAX_TENANT_ROWS``."""
    rows = sorted(tier.fairness.tenants, key=lambda t: (-(t.drop_rate.value or 0.0), t.tenant))
    return {"rows": rows[:MAX_TENANT_ROWS], "hidden": max(0, len(rows) - MAX_TENANT_ROWS), "total": len(rows)}


def _evidence(summary: Summary) -> list[dict[str, Any]]:
    """First requests not served, per tier (tiers in summary order)."""
    out = []
    for tier in summary.tiers:
        rows = sorted((e for e in summary.evidence if e.tier == tier.name), key=lambda e: e.t_s)
        shown = [{"e": e, "clock": fmt.clock_t(summary, e.t_s)} for e in rows[:MAX_EVIDENCE_ROWS]]
        out.append({"tier": tier.name, "rows": shown, "hidden": max(0, len(rows) - MAX_EVIDENCE_ROWS)})
    return out


def _percentile_rows(tier: TierSummary) -> list[tuple[str, Any]]:
    """(label, Percentiles) rows of the latency table."""
    lat = tier.latency
    rows = [
        ("TTFT from send", lat.ttft_ms),
        ("TTFT from intended send", lat.ttft_from_intended_ms),
        ("time per output token", lat.tpot_ms),
        ("max inter-token gap", lat.itl_max_ms),
        ("end to end", lat.e2e_ms),
    ]
    # pooled ITL beside TPOT; not recorded: a row of dashes that says why, never a figure made up from TPOT
    rows.insert(3, ("inter-token gap, pooled (every token)", lat.itl_ms) if lat.itl_ms is not None else
                ("inter-token gap, pooled: not recorded", Percentiles(n=0)))  # why: in the note under the table
    if tier.saturation is not None:
        rows.insert(2, ("TTFT during saturation", tier.saturation.ttft_ms))
    return rows


def context(summary: Summary, table: pd.DataFrame | None = None, csv_text: str | None = None) -> dict[str, Any]:
    """Everything the template needs, from the summary and the audit's attempts table (pure)."""
    if csv_text is None:
        csv_text = drops.render_csv(drops.drop_rows(summary, table))
    drop_count = max(0, csv_text.count("\n") - 1)
    colours = fmt.tier_colours(summary)
    fairness_findings = [f for f in summary.findings if f.kind in FAIRNESS_KINDS]
    payload = charts.chart_payload(summary)
    has_fallback = bool(summary.timeline.breaker) or any(r.route != "primary" for r in summary.routes)
    answer = limit.found(summary)
    return {
        "find_limit": None if answer is None else {"lines": limit.lines(answer), "header": limit.STEPS_HEADER,
                                                    "rows": limit.step_rows(answer)},
        "s": summary,
        "run": summary.run,
        "colours": colours,
        "verdict_line": sentences.verdict_line(summary),
        "gate_word": sentences.gate_word(summary),
        "preset_line": sentences.preset_line(summary),
        # the unclassified lines have their own box under the verdict
        "headline": [line for line in sentences.headline(summary)[1:]
                     if line not in sentences.unclassified_lines(summary)],
        "never_dropped": sentences.never_dropped(summary),
        "whole_run": [sentences.whole_run_line(t) for t in summary.tiers],
        "fairness_lines": {t.name: sentences.fairness_line(t) for t in summary.tiers},
        "task_lines": [
            sentences.task_line(t, stats, what)
            for t in summary.tiers
            for stats, what in ((t.tasks, "agent tasks"), (t.sessions, "chat sessions"))
            if stats is not None
        ],
        "agent_lines": sentences.agents_lines(summary),
        "rows": [_tier_row(summary, t) for t in summary.tiers],
        "control_rows": control.rows(summary),
        "class_columns": _class_columns(summary),
        # every unserved class some tier had (a table of always-zero columns says nothing)
        "dropped_classes": [c for c in UNSERVED_CLASSES if any(t.by_class.get(c) for t in summary.tiers)],
        "unclassified_findings": [f for f in summary.findings if f.kind == "unclassified"],
        "statuses": _statuses(summary),
        "bars": charts.outcome_bars(summary),
        "strips": charts.breaker_strips(summary),
        "tenants": {t.name: _tenants(t) for t in summary.tiers},
        "percentile_rows": {t.name: _percentile_rows(t) for t in summary.tiers},
        "evidence": _evidence(summary),
        "fairness_findings": fairness_findings,
        "other_findings": [f for f in summary.findings
                           if f.kind != "unclassified" and (f.kind not in FAIRNESS_KINDS or f.severity == "error")],
        "has_fallback": has_fallback,
        "tiers_with_timeline": [t.name for t in summary.tiers if charts.tier_has_timeline(summary, t)],
        "windows": [(fmt.span_t(summary, w.start_s, w.end_s), w) for w in summary.windows],
        "saturation_line": sentences.saturation_line(summary),
        "outage_line": sentences.outage_line(summary),
        "side_by_side": sidebyside.comparison_rows(summary) if sidebyside.shown(summary) else None,
        "spend_rows": sidebyside.spend_rows(summary) if sidebyside.spend_shown(summary) else None,
        "spend_header": sidebyside.SPEND_HEADER,
        "outages": [(fmt.span_t(summary, o.start_s, o.end_s), o) for o in summary.outages],
        "breaker_changes": [
            {**c, "clock": fmt.clock_t(summary, float(c.get("t_s", c.get("t", 0)) or 0))}
            for c in summary.timeline.breaker
        ],
        "drop_count": drop_count,
        "csv_uri": drops.data_uri(csv_text),
        "has_cdf": any(t.ttft_cdf_ms for t in summary.tiers),
        "has_timeline": bool(summary.timeline.t),
        "merged": payload["timeline"]["merged"],
        "data_json": script_json(payload),
        "uplot_js": inline_asset(VENDOR / "uPlot.iife.min.js"),
        "uplot_css": inline_asset(VENDOR / "uPlot.min.css"),
        "charts_js": inline_asset(TEMPLATES / "charts.js"),
        "css": inline_asset(TEMPLATES / "report.css"),
        "wait_header": waits.header(summary),
        "wait_caption": waits.CAPTION,
        "wait_rows": waits.rows(summary),
        "wait_phase_header": waits.header(summary, by_phase=True),
        "wait_phase_rows": waits.rows(summary, by_phase=True),
        "wait_lines": waits.lines(summary),
        "wait_bars": waits.bars(summary),
        "wait_colours": {k: v for k, v in waits.COLOURS.items() if k in waits.parts_shown(summary)},
    }


def render_html(summary: Summary, table: pd.DataFrame | None = None, csv_text: str | None = None) -> str:
    """The whole report as one offline HTML document."""
    ctx = context(summary, table, csv_text)
    # Assets are inlined verbatim (checked above); everything else is autoescaped by jinja2.
    for key in ("data_json", "uplot_js", "uplot_css", "charts_js", "css"):
        ctx[key] = Markup(ctx[key])
    return environment().get_template("report.html.j2").render(**ctx)
