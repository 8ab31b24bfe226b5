"""Comparison reports: Markdown (terminal, CI step summary) and a self-contained HTML page."""

from __future__ import annotations

from markupsafe import Markup

from rushhour.reports import fmt
from rushhour.studies.compare import CompareResult, Comparison, Test, describe_test

VERDICT_WORDS = {"ok": "no regression", "regression": "REGRESSION", "invalid": "INVALID"}


def _value(test: Test, v: float | None) -> str:
    return fmt.pct(v) if test.metric == "drop_rate" else fmt.ms(v)


def _change(test: Test) -> str:
    if test.metric == "drop_rate":
        if test.diff is None:
            return "–"
        return (f"{test.diff * 100:+.1f} pt ({(test.low or 0) * 100:+.1f} … {(test.high or 0) * 100:+.1f})")
    if test.rel is None:
        return "–"
    return f"{test.rel * 100:+.0f} % ({(test.rel_low or 0) * 100:+.0f} … {(test.rel_high or 0) * 100:+.0f})"


def _p(v: float) -> str:
    return fmt.p_value(v)


def _status(test: Test) -> str:
    if not test.judged:
        return "not judged"
    if test.regression:
        return "REGRESSION"
    if test.significant and test.practical:
        return "worse"
    if test.significant:
        return "significant, under threshold"
    return "ok"


def render_compare_markdown(result: CompareResult) -> str:
    """Every comparison as Markdown tables plus the verdict line."""
    lines: list[str] = []
    for c in result.comparisons:
        lines += _markdown_one(c, result)
    return "\n".join(lines) + "\n"


def _markdown_one(c: Comparison, result: CompareResult) -> list[str]:
    b, k = c.baseline, c.candidate
    lines = [f"## Compare: {VERDICT_WORDS[c.verdict]}", "",
             f"baseline `{b.run_id}` ({b.scenario}, {b.profile}, seed {b.seed}) vs candidate `{k.run_id}` "
             f"({k.scenario}, {k.profile}, seed {k.seed})", ""]
    lines += [f"- **{r}**" for r in c.regressions]
    lines += [f"- warning: {w}" for w in c.warnings]
    lines += ["", "| tier | requests | not served | TTFT p50 | TTFT p99 | E2E p99 | goodput/s |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for row in c.tiers:
        lines.append(
            f"| {row.tier} | {row.requests[0]} → {row.requests[1]} | {fmt.pct(row.drop_rate[0])} → "
            f"{fmt.pct(row.drop_rate[1])} | {fmt.ms(row.ttft_p50_ms[0])} → {fmt.ms(row.ttft_p50_ms[1])} | "
            f"{fmt.ms(row.ttft_p99_ms[0])} → {fmt.ms(row.ttft_p99_ms[1])} | {fmt.ms(row.e2e_p99_ms[0])} → "
            f"{fmt.ms(row.e2e_p99_ms[1])} | {row.goodput_per_s[0]:.1f} → {row.goodput_per_s[1]:.1f} |")
    lines += ["", "| tier | metric | baseline | candidate | change (95 % CI) | p | p (Holm) | threshold | result |",
              "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for t in c.tests:
        lines.append(f"| {t.tier} | {t.metric} | {_value(t, t.base)} | {_value(t, t.cand)} | {_change(t)} | "
                     f"{_p(t.p)} | {_p(t.p_adjusted)} | {t.threshold} | {_status(t)} |")
    lines += ["", "| tier | distribution | n | median | P(candidate > baseline) (95 % CI) | Mann-Whitney p |",
              "|---|---|---:|---:|---:|---:|"]
    for s in c.shifts:
        lines.append(f"| {s.tier} | {s.metric} | {s.n_base} → {s.n_cand} | {fmt.ms(s.median_base)} → "
                     f"{fmt.ms(s.median_cand)} | {s.prob_superiority:.2f} ({s.ps_low:.2f} … {s.ps_high:.2f}) | "
                     f"{_p(s.p_two_sided)} |")
    lines += ["", f"Regression = one-sided p < {result.alpha:g} after {result.rule.get('correction', 'holm')} "
              f"correction AND p99 +{result.rule.get('latency_rel', 0.1) * 100:g} % / drop rate "
              f"+{result.rule.get('drop_abs', 0.01) * 100:g} pt or worse; or an SLO check that passed in the "
              "baseline and fails in the candidate, significant or not.", ""]
    return lines


def render_compare_html(result: CompareResult) -> str:
    """The comparison as a self-contained HTML page (shared report CSS)."""
    from rushhour.reports.page import page_css, page_env

    return str(page_env().get_template("compare.html.j2").render(
        result=result, css=Markup(page_css()), words=VERDICT_WORDS, value=_value, change=_change, p=_p,
        status=_status, describe=describe_test,
    ))
