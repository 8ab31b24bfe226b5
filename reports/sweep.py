"""Sweep and study reports: ``sweep.json`` / ``study.json`` + self-contained HTML (static SVG charts) + Markdown."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from rushhour.reports import fmt
from rushhour.reports.charts import nice_ticks, tick_label
from rushhour.reports.page import colours_for, page_css, page_env, write_pages
from rushhour.studies.knee import StudyResult, SweepResult
from rushhour.studies.pareto import pareto_points

CHART_W, CHART_H = 380, 220
PAD_L, PAD_R, PAD_T, PAD_B = 56, 12, 14, 38


# Readable words for a knee's status (sweep.json keeps the codes).
KNEE_WORDS = {"within": "holds, then fails", "always_passes": "holds at every load",
              "never_passes": "fails at every load", "no_slo": "no SLO", "no_data": "no requests"}


def knee_words(status: str) -> str:
    """``always_passes`` → ``holds at every load``."""
    return KNEE_WORDS.get(status, status.replace("_", " "))


def step_words(status: str, confident: bool) -> str:
    """A tier's verdict at one step: ``pass``, ``fail``, ``pass, not confident``, ``no SLO``."""
    if status in ("pass", "fail"):
        return status if confident else f"{status}, not confident"
    return knee_words(status)


def line_chart(series: Sequence[tuple[str, str, Sequence[tuple[float, float | None]]]], *, x_label: str,
               y_label: str, y_fmt: str = "{:g}", hline: float | None = None, title: str = "",
               y_top: float | None = None) -> Markup:
    """A small static SVG line chart: (label, colour, points) per series; None values break the line.

    Both axes start at 0 and are ticked at round steps (``reports.charts.nice_ticks``), so every tick's
    label is its exact value; ``y_fmt`` formats the points' tooltips; ``y_top`` is the axis' natural
    top (100 for a percentage) when no point exceeds it.
    """
    xs: list[float] = [x for _, _, pts in series for x, _ in pts]
    ys: list[float] = [y for _, _, pts in series for _, y in pts if y is not None]
    if hline is not None:
        ys.append(hline)
    if not xs or not ys:
        return Markup('<p class="muted small">no data</p>')
    top = y_top if y_top is not None and max(ys) <= y_top else max(ys) * 1.02
    x_ticks, y_ticks = nice_ticks(max(xs) * 1.02), nice_ticks(top)
    x0, x1 = 0.0, x_ticks[-1]
    y1 = y_ticks[-1]
    iw, ih = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B

    def px(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * iw

    def py(y: float) -> float:
        return PAD_T + ih - (y / y1) * ih

    parts = [f'<svg class="rh-chart" viewBox="0 0 {CHART_W} {CHART_H}" width="{CHART_W}" height="{CHART_H}" '
             f'role="img" aria-label="{escape(title or y_label)}">']
    for tick in y_ticks:
        parts.append(f'<line x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{py(tick):.1f}" y2="{py(tick):.1f}" '
                     f'stroke="#e5e7eb"/><text x="{PAD_L - 6}" y="{py(tick) + 4:.1f}" text-anchor="end" '
                     f'font-size="10" fill="#5b6474">{escape(tick_label(tick, y_ticks))}</text>')
    for x in x_ticks:
        parts.append(f'<text x="{px(x):.1f}" y="{CHART_H - PAD_B + 14}" text-anchor="middle" font-size="10" '
                     f'fill="#5b6474">{escape(tick_label(x, x_ticks))}</text>')
    parts.append(f'<text x="{PAD_L + iw / 2:.1f}" y="{CHART_H - 6}" text-anchor="middle" font-size="11" '
                 f'fill="#1d2330">{escape(x_label)}</text>')
    parts.append(f'<text x="12" y="{PAD_T + ih / 2:.1f}" transform="rotate(-90 12 {PAD_T + ih / 2:.1f})" '
                 f'text-anchor="middle" font-size="11" fill="#1d2330">{escape(y_label)}</text>')
    if hline is not None:
        parts.append(f'<line x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{py(hline):.1f}" y2="{py(hline):.1f}" '
                     f'stroke="#b42318" stroke-dasharray="4 3"/>')
    for label, colour, pts in series:
        run: list[str] = []
        segments: list[list[str]] = [run]
        for x, y in sorted(pts, key=lambda p: p[0]):
            if y is None:
                run = []
                segments.append(run)
                continue
            run.append(f"{px(x):.1f},{py(y):.1f}")
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                         f'<title>{escape(label)}: {escape(y_fmt.format(y))} at {x:.1f}</title></circle>')
        for seg in segments:
            if len(seg) > 1:
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(seg)}"/>')
    parts.append(f'<rect x="{PAD_L}" y="{PAD_T}" width="{iw}" height="{ih}" fill="none" stroke="#dde1e8"/></svg>')
    return Markup("".join(parts))


def sweep_charts(result: SweepResult) -> list[dict[str, Any]]:
    """Per replica count: goodput, drop rate and TTFT p99 against offered load, one line per tier."""
    tiers: list[str] = []
    for s in result.steps:
        for t in s.tiers:
            if t.tier not in tiers:
                tiers.append(t.tier)
    colours = colours_for(tiers)
    groups = []
    for r in result.replicas:
        steps = sorted((s for s in result.steps if s.replicas == r), key=lambda s: s.scale)

        def series(attr: str, scale: float = 1.0, steps: list[Any] = steps) -> list[Any]:
            out = []
            for name in tiers:
                pts = []
                for s in steps:
                    row = s.tier(name)
                    value = getattr(row, attr) if row else None
                    pts.append((s.offered_rps, None if value is None else value * scale))
                out.append((name, colours[name], pts))
            return out

        label = f"{r} replica{'s' if r != 1 else ''}" if r else "as configured"
        groups.append({
            "label": label,
            "charts": [
                line_chart(series("goodput_per_s"), x_label="offered load (req/s)", y_label="goodput (req/s)",
                           title=f"goodput, {label}"),
                line_chart(series("drop_rate", 100.0), x_label="offered load (req/s)", y_label="not served (%)",
                           y_fmt="{:.0f}", title=f"drop rate, {label}", y_top=100.0),
                line_chart(series("ttft_p99_ms", 0.001), x_label="offered load (req/s)", y_label="TTFT p99 (s)",
                           y_fmt="{:.1f}", title=f"TTFT p99, {label}"),
            ],
        })
    return groups


def pareto_chart(result: SweepResult) -> Markup:
    """Output tokens/s per user against per replica, one line per tier through its steps (frontier points ringed)."""
    points = pareto_points(result.steps)
    tiers = list(dict.fromkeys(p.tier for p in points))
    colours = colours_for(tiers)
    series = [(name, colours[name], [(p.per_replica, p.per_user) for p in points if p.tier == name])
              for name in tiers]
    per = "replica" if any(s.replicas for s in result.steps) else "stack"
    return line_chart(series, x_label=f"output tokens/s per {per}", y_label="output tokens/s per user",
                      y_fmt="{:.1f}", title="per-tier Pareto: tokens/s per user against per " + per)


def pareto_rows(result: SweepResult) -> list[list[str]]:
    """The Pareto table: tier, step, scale, replicas, per user, per replica, on the frontier."""
    return [[p.tier, str(p.step), f"{p.scale:.3g}×", str(p.replicas or "–"), f"{p.per_user:.1f}",
             f"{p.per_replica:.1f}", "yes" if p.frontier else "no"] for p in pareto_points(result.steps)]


def render_sweep_html(result: SweepResult) -> str:
    """The sweep report: plain answers, knees, charts and the step table."""
    tiers = list(dict.fromkeys(t.tier for s in result.steps for t in s.tiers))
    return str(page_env().get_template("sweep.html.j2").render(
        kind="sweep", sweep=result, study=None, css=Markup(page_css()), groups=sweep_charts(result),
        colours=colours_for(tiers), tiers=tiers, search=getattr(result, "search", None), knee_words=knee_words,
        step_words=step_words, pareto_chart=pareto_chart(result), pareto_rows=pareto_rows(result),
    ))


def render_sweep_markdown(result: SweepResult) -> str:
    """The sweep as Markdown: answers, knees and steps."""
    lines = [f"## Sweep `{result.scenario}` ({result.sweep_id})", ""]
    lines += [f"- {a}" for a in result.answers] + [""]
    search = getattr(result, "search", None)
    if search is not None:
        lines += ["### SLO boundary", "", "| # | scale | offered req/s | seed | verdict | checks |",
                  "|---:|---:|---:|---:|---|---|"]
        for i, p in enumerate(search.probes, start=1):
            checks = "<br>".join(f"{t.tier}: {'; '.join(t.checks)}" for t in p.tiers if t.checks)
            verdict = p.outcome + ("" if p.confident else ", not confident") + ("" if p.valid else ", invalid run")
            lines.append(f"| {i} | {p.scale:.3g}× | {p.offered_rps:.1f} | {p.seed} | {verdict} | {checks} |")
        lines += [f"- cliff: {c.tier} {c.what} between {c.from_scale:.3g}× and {c.to_scale:.3g}×"
                  for c in search.cliffs] + [""]
    lines += ["| tier | replicas | knee | interval (req/s) | confident | drops from |",
              "|---|---:|---|---|---|---|"]
    for k in result.knees:
        interval = f"{_n(k.knee_rps)} … {_n(k.fail_rps)}"
        lines.append(f"| {k.tier} | {k.replicas or '–'} | {knee_words(k.status)} | {interval} | "
                     f"{'yes' if k.confident_pass else 'no'} | {_n(k.drop_onset_rps)} |")
    pareto = pareto_rows(result)
    if pareto:
        lines += ["", "### Per-tier Pareto: output tokens/s per user against per replica", "",
                  "| tier | step | scale | replicas | tok/s per user | tok/s per replica | frontier |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in pareto]
    lines += ["", "| step | scale | replicas | offered req/s | tier | status | goodput/s | not served | TTFT p99 |",
              "|---:|---:|---:|---:|---|---|---:|---:|---:|"]
    for s in result.steps:
        for t in s.tiers:
            lines.append(f"| {s.index} | {s.scale:.3g}× | {s.replicas or '–'} | {s.offered_rps:.1f} | {t.tier} | "
                         f"{step_words(t.status, t.confident)} | {t.goodput_per_s:.1f} | {fmt.pct(t.drop_rate)} | "
                         f"{fmt.ms(t.ttft_p99_ms)} |")
    lines += [f"- note: {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def _n(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def write_sweep_reports(result: SweepResult, root: Path) -> dict[str, Path]:
    """Write sweep.json, sweep.html and sweep.md into the sweep folder."""
    return write_pages(result, root, "sweep", render_sweep_html(result), render_sweep_markdown(result))


# --------------------------------------------------------------------------- study


def study_charts(result: StudyResult) -> list[Markup]:
    """Top-tier P99 E2E speedup vs fifo against K, one line per policy/load."""
    colours = _series_colours(result)
    series = [(key, colour, [(float(k), v) for k, v in result.speedup_by_k[key].items()])
              for key, colour in colours.items()]
    gains: dict[str, dict[int, list[float]]] = {}
    for r in result.rows:
        if r.cpl_gain is not None:
            gains.setdefault(f"{r.policy}/{r.load}", {}).setdefault(r.k, []).append(r.cpl_gain * 100)
    cpl = [(key, colours.get(key, "#666"), [(float(k), sum(v) / len(v)) for k, v in sorted(ks.items())])
           for key, ks in sorted(gains.items())]
    return [
        line_chart(series, x_label="tiers (K)", y_label="top-tier P99 E2E speedup vs fifo (×)", y_fmt="{:.1f}",
                   hline=1.0, title="speedup by K"),
        line_chart(cpl, x_label="tiers (K)", y_label="cost per latency, lower by (%)", y_fmt="{:.0f}",
                   title="cost-per-latency gain by K"),
    ]


def render_study_html(result: StudyResult) -> str:
    """The study report: claims beside our figures, charts, the grid table."""
    colours = _series_colours(result)
    return str(page_env().get_template("sweep.html.j2").render(
        kind="study", sweep=None, study=result, css=Markup(page_css()), study_charts=study_charts(result),
        colours=colours, tiers=list(colours), groups=[],
    ))


def _series_colours(result: StudyResult) -> dict[str, str]:
    """A stable colour per policy/load series, in sorted order (charts and legend agree)."""
    return {key: fmt.TIER_PALETTE[i % len(fmt.TIER_PALETTE)] for i, key in enumerate(sorted(result.speedup_by_k))}


def render_study_markdown(result: StudyResult) -> str:
    """The study as Markdown."""
    lines = [f"## Multi-tier study ({result.study_id}): {result.runs} runs", ""]
    lines += [f"- {n}" for n in result.notes] + ["", "| claim (published) | ours | verdict |", "|---|---|---|"]
    lines += [f"| {c.claim} | {c.ours} | {c.agrees} |" for c in result.claims]
    lines += ["", "| K | mix | load | policy | top P99 E2E | fifo top P99 E2E | speedup | CPL gain | not served |",
              "|---:|---|---|---|---:|---:|---:|---:|---:|"]
    for r in sorted(result.rows, key=lambda r: (r.load, r.policy, r.mix, r.k)):
        lines.append(f"| {r.k} | {r.mix} | {r.load} | {r.policy} | {fmt.ms(r.top_e2e_p99_ms)} | "
                     f"{fmt.ms(r.fifo_top_e2e_p99_ms)} | {fmt.times(r.top_speedup, 2)} | {fmt.pct(r.cpl_gain)} | "
                     f"{fmt.pct(r.drop_rate)} |")
    return "\n".join(lines) + "\n"


def write_study_reports(result: StudyResult, root: Path) -> dict[str, Path]:
    """Write study.json, study.html and study.md into the study folder."""
    return write_pages(result, root, "study", render_study_html(result), render_study_markdown(result))
