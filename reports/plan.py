"""Capacity-plan reports: ``plan.json`` + a self-contained HTML page (static SVG plots) + Markdown."""

from __future__ import annotations

from pathlib import Path

from markupsafe import Markup

from rushhour.audit import text
from rushhour.reports.page import colours_for, page_css, page_env, write_pages
from rushhour.reports.sweep import line_chart, render_sweep_markdown, sweep_charts
from rushhour.studies.plan import PlanResult, ScaleAnswer, rate_varies

ISSUED_NOTE = ("Requests issued: logical requests per second the clients issued (every tier, retries folded, "
               "those turned away before sending included), measured in the cell of the answering replica count "
               "(none answering: the largest run). Open-loop arrivals issue the same rate on any replica count; "
               "closed-loop personas (agents, multi-turn chat) issue their next request only after an answer, "
               "so they issue more where answers come faster. The grid's charts and table call the same per-cell "
               "rate offered load.")


def plan_charts(result: PlanResult) -> list[Markup]:
    """Replicas needed against the workload's scale (every SLO, then each tier alone), and GPU-hours."""
    tiers = [t.tier for t in result.tiers]
    colours = colours_for(tiers)
    every = ("every SLO", "#101828", [(a.scale, None if a.replicas_needed is None else float(a.replicas_needed))
                                      for a in result.answers])
    own = [(t.tier, colours[t.tier], [(float(s), None if r is None else float(r)) for s, r in t.min_replicas.items()])
           for t in result.tiers]
    gpu = [("GPU-hours per hour", "#101828", [(a.scale, a.gpu_hours_per_hour) for a in result.answers])]
    return [
        line_chart([every, *own], x_label="workload scale (×)", y_label="replicas needed",
                   title="smallest replica count meeting the SLO, per scale"),
        line_chart(gpu, x_label="workload scale (×)", y_label="GPU-hours per hour", title="GPU-hours per hour"),
    ]


def issued(answer: ScaleAnswer) -> tuple[str, str]:
    """The rate the clients issued at a scale, and where: ('5.4 req/s', 'on 8 replicas; 3.1 req/s to 5.4 req/s
    across 1–8')."""
    if answer.offered_rps is None or answer.offered_at_replicas is None:
        return text.DASH, ""
    r = answer.offered_at_replicas
    where = f"on {r} replica{'s' if r != 1 else ''}"
    rates = answer.offered_rps_by_replicas
    if len(rates) > 1 and rate_varies(rates.values()):
        counts = sorted(int(k) for k in rates)
        where += (f"; {text.rps(min(rates.values()))} to {text.rps(max(rates.values()))} "
                  f"across {counts[0]}–{counts[-1]}")
    elif len(rates) > 1:
        where += "; about the same on every replica count run"
    return text.rps(answer.offered_rps), where


def render_plan_html(result: PlanResult) -> str:
    """The plan page: the answers per scale, the plot, the tiers' knees, then the grid as a sweep."""
    tiers = [t.tier for t in result.tiers]
    return str(page_env().get_template("plan.html.j2").render(
        plan=result, sweep=result.sweep, css=Markup(page_css()), charts=plan_charts(result),
        groups=sweep_charts(result.sweep), colours=colours_for(tiers), tiers=tiers,
        issued={a.scale: issued(a) for a in result.answers}, issued_note=ISSUED_NOTE,
    ))


def render_plan_markdown(result: PlanResult) -> str:
    """The plan as Markdown: answers, the replicas table, then the grid."""
    lines = [f"## Capacity plan `{result.scenario}` ({result.plan_id}) — simulated (virtual time)", ""]
    lines += [f"- {s}" for s in result.sentences] + [""]
    lines += ["| scale | requests issued | replicas needed | GPU-hours/hour | failing below |",
              "|---:|---:|---:|---:|---|"]
    for a in result.answers:
        fails = "; ".join(f"{r}: {', '.join(t)}" for r, t in a.failing.items()) or "–"
        rate, where = issued(a)
        rps = f"{rate} ({where})" if where else rate
        lines.append(f"| {a.scale:g}× | {rps} | {a.replicas_needed or 'none'} | "
                     f"{_n(a.gpu_hours_per_hour)} | {fails} |")
    lines += ["", ISSUED_NOTE, ""] + [f"- note: {n}" for n in result.notes] + [""]
    return "\n".join(lines) + "\n" + render_sweep_markdown(result.sweep)


def _n(v: float | None) -> str:
    return "–" if v is None else f"{v:g}"


def write_plan_reports(result: PlanResult, root: Path) -> dict[str, Path]:
    """Write plan.json, plan.html and plan.md into the plan folder."""
    return write_pages(result, root, "plan", render_plan_html(result), render_plan_markdown(result))

