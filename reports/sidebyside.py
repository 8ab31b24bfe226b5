"""A vendor's tiers side by side (e.g. flex vs default): TTFT, inflation and drops with intervals; spend.

Pure: rows of text cells from the summary, shared by the HTML and Markdown reports.
"""

from __future__ import annotations

from rushhour.audit.summary import UNSERVED_CLASSES, Inflation, Percentiles, Summary, TierSpend
from rushhour.reports import fmt


def shown(summary: Summary) -> bool:
    """Side by side when two or more tiers and one of them names a vendor service tier."""
    spend = summary.spend
    return bool(spend and len(summary.tiers) >= 2 and any(t.service_tier for t in spend.tiers))


def spend_shown(summary: Summary) -> bool:
    """The spend table when the run has token counts or a budget."""
    spend = summary.spend
    return bool(spend and (spend.prompt_tokens or spend.output_tokens or spend.budget_limits))


def pctl_ci(p: Percentiles, key: str) -> str:
    """'812 ms [760–880 ms]': a percentile with its 95 % interval, when the audit has one."""
    text = fmt.pctl_text(p, key)
    ci = p.ci.get(key)
    return f"{text} [{fmt.ms(ci[0])}–{fmt.ms(ci[1])}]" if ci and text != "–" else text


def inflation(infl: Inflation, key: str) -> str:
    """'3.2× [2.9–3.6×]': an inflation ratio with its interval, '–' without an idle baseline."""
    value = infl.p50_x if key == "p50" else infl.p99_x
    ci = infl.ci.get(key)
    text = fmt.times(value)
    return f"{text} [{fmt.times(ci[0])}–{fmt.times(ci[1])}]" if ci and value is not None else text


def classes(summary: Summary) -> list[str]:
    """The unserved classes some tier has (every tier gets a cell, 0 % included)."""
    return [c for c in UNSERVED_CLASSES if any(t.by_class.get(c, 0) for t in summary.tiers)]


def comparison_rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """(header, one row per figure): tiers as columns, so the service tiers read side by side."""
    spend = {t.tier: t for t in (summary.spend.tiers if summary.spend else [])}
    names = [t.name for t in summary.tiers]
    header = ["", *[f"{n} (service tier {spend[n].service_tier})"
                    if n in spend and spend[n].service_tier and spend[n].service_tier != n else n for n in names]]
    rows = [
        ["requests sent", *[fmt.count(t.requests) for t in summary.tiers]],
        ["TTFT p50 [95 % CI]", *[pctl_ci(t.latency.ttft_ms, "p50") for t in summary.tiers]],
        ["TTFT p99 [95 % CI]", *[pctl_ci(t.latency.ttft_ms, "p99") for t in summary.tiers]],
        ["TTFT inflation over idle, p50 [95 % CI]", *[inflation(t.inflation, "p50") for t in summary.tiers]],
        ["TTFT inflation over idle, p99 [95 % CI]", *[inflation(t.inflation, "p99") for t in summary.tiers]],
        ["not served [95 % CI]", *[fmt.rate_ci(t.drop_rate) for t in summary.tiers]],
    ]
    for cls in classes(summary):
        rows.append([f"· {fmt.class_label(cls)}", *[fmt.rate_ci(t.drop_rate_by_class.get(cls)) for t in summary.tiers]])
    if summary.spend:
        rows.append(["tokens in / out", *[_tokens(spend.get(n)) for n in names]])
        rows.append(["spend", *[cost(spend.get(n)) for n in names]])
    return header, rows


def _tokens(row: TierSpend | None) -> str:
    return "–" if row is None else f"{fmt.count(row.prompt_tokens)} / {fmt.count(row.output_tokens)}"


def usd(value: float | None) -> str:
    """'$0.0123', '$1.23'."""
    if value is None:
        return "–"
    return f"${value:.4f}" if abs(value) < 1 else f"${value:,.2f}"


def cost(row: TierSpend | None) -> str:
    """A tier's spend, or 'no price' (never another tier's price)."""
    if row is None:
        return "–"
    if row.cost_usd is None:
        return "no price"
    return f"{usd(row.cost_usd)} ({'own price' if row.price_from == 'tier' else 'run prices'})"


def budget_use(limits: dict[str, float], used: dict[str, float], share: dict[str, float]) -> str:
    """'requests 120 of 300 (40 %); cost $0.41 of $2.00 (21 %)', or '–' without limits."""
    parts = []
    for limit, key, show in (("max_requests", "requests", fmt.count), ("max_tokens", "tokens", fmt.count),
                             ("max_cost_usd", "cost_usd", usd)):
        if limit in limits:
            got = used.get(key)
            of = f"{show(got) if got is not None else '–'} of {show(limits[limit])}"
            parts.append(f"{key.replace('_usd', '')} {of}" + (f" ({fmt.pct(share[limit])})" if limit in share else ""))
    if not parts and used:  # no limit of its own: what the guard counted against the run's
        counted = [f"{fmt.count(used['requests'])} requests" if "requests" in used else "",
                   f"{fmt.count(used['tokens'])} tokens" if "tokens" in used else "",
                   usd(used["cost_usd"]) if "cost_usd" in used else ""]
        return "counted " + ", ".join(c for c in counted if c) + " (no limit of its own)"
    return "; ".join(parts) or "–"


def spend_rows(summary: Summary) -> list[list[str]]:
    """Per tier, then the run: tokens, price, spend, budget use."""
    spend = summary.spend
    if spend is None:
        return []
    rows = []
    for t in spend.tiers:
        price = ("–" if t.price_per_mtok_in is None else
                 f"{usd(t.price_per_mtok_in)} / {usd(t.price_per_mtok_out)} per Mtok")
        rows.append([t.tier, t.service_tier or "–", fmt.count(t.prompt_tokens), fmt.count(t.output_tokens), price,
                     cost(t) if t.cost_usd is not None else str(t.no_price),
                     budget_use(t.budget_limits, t.budget_used, t.budget_share)])
    rows.append(["run", "", fmt.count(spend.prompt_tokens), fmt.count(spend.output_tokens), "",
                 usd(spend.cost_usd) + (f" (without {', '.join(spend.unpriced_tiers)})" if spend.unpriced_tiers
                                        else ""),
                 budget_use(spend.budget_limits, spend.budget_used, spend.budget_share)
                 + (f"; reached: {', '.join(spend.budget_reached)}" if spend.budget_reached else "")])
    return rows


SPEND_HEADER = ["tier", "service tier", "tokens in", "tokens out", "price (in / out)", "spend", "budget use"]
