"""Report views of a vendor run (service tiers side by side, spend) and a maintenance run (outages, times)."""

from __future__ import annotations

import re

from rushhour.audit.summary import Outage, Spend, Summary, TierSpend
from rushhour.reports import fmt, sentences
from rushhour.reports.html import render_html
from rushhour.reports.markdown import render_markdown


def _vendor(summary: Summary) -> Summary:
    names = [t.name for t in summary.tiers]
    rows = [TierSpend(tier=names[0], service_tier="default", prompt_tokens=1000, output_tokens=100,
                      price_per_mtok_in=0.4, price_per_mtok_out=1.6, price_from="run", cost_usd=0.00056),
            TierSpend(tier=names[1], service_tier="flex", prompt_tokens=2000, output_tokens=200,
                      no_price="no price for service tier 'flex': the price table has no budget.per_tier row")]
    spend = Spend(tiers=rows, prompt_tokens=3000, output_tokens=300, cost_usd=0.00056, unpriced_tiers=[names[1]],
                  budget_limits={"max_requests": 300.0}, budget_used={"requests": 120.0},
                  budget_share={"max_requests": 0.4})
    first = summary.tiers[0]
    infl = first.inflation.model_copy(update={"p50_x": 3.2, "ci": {"p50": (2.9, 3.6)}})
    tiers = [first.model_copy(update={"inflation": infl}), *summary.tiers[1:]]
    return summary.model_copy(update={"spend": spend, "tiers": tiers})


def test_service_tiers_side_by_side_and_spend(summary: Summary) -> None:
    s = _vendor(summary)
    html = render_html(s)
    assert 'id="side-by-side"' in html and 'id="spend"' in html
    table = html.split('id="side-by-side"')[1].split("</table>")[0]
    assert "TTFT p99 [95 % CI]" in table and "inflation" in table and "(service tier flex)" in table
    assert "no price" in table and "$0.0006 (run prices)" in table
    assert "3.2× [2.9×–3.6×]" in table  # inflation with its interval
    md = render_markdown(s)
    assert "### Service tiers side by side" in md and "### Tokens, spend and budget" in md
    assert "requests 120 of 300 (40 %)" in md
    flex_row = next(line for line in md.splitlines() if line.startswith(f"| {s.tiers[1].name} | flex |"))
    assert "no price for service tier 'flex'" in flex_row and "$" not in flex_row.split("|")[6]


def test_no_side_by_side_without_service_tiers(summary: Summary) -> None:
    assert 'id="side-by-side"' not in render_html(summary)
    assert "side by side" not in render_markdown(summary)


def test_an_outage_is_named_apart_with_run_relative_times(summary: Summary) -> None:
    s = summary.model_copy(update={"outages": [Outage(start_s=25, end_s=45, name="model-swap", kind="replica_down",
                                                      detail="scheduled fault 'model-swap' (replica_down): every "
                                                             "replica down")]})
    line = sentences.outage_line(s)
    assert line.startswith("Scheduled outage: the primary route was down for 20.0 s, 12:00:25–12:00:45 UTC "
                           "(t = 25–45 s) — scheduled fault 'model-swap'")
    assert "not saturation" in line
    html = render_html(s)
    assert 'id="outage-table"' in html and '"outages":[{"start":25.0,"end":45.0,"name":"model-swap"' in html
    assert fmt.clock_t(s, 27.14) == "12:00:27 (t = 27.1 s)" and fmt.run_t(25.0) == "25"


def test_client_refusals_are_not_reasons_given_by_the_server(summary: Summary) -> None:
    tiers = [t.model_copy(update={"client_reasons": {"breaker_open": 44}}) if i == 0 else t
             for i, t in enumerate(summary.tiers)]
    html = render_html(summary.model_copy(update={"tiers": tiers}))
    server = html.split("Reasons given by the server")[1].split("</table>")[0]
    client = html.split('id="client-reasons"')[1].split("</table>")[0]
    assert "breaker_open" not in server and "breaker_open" in client
    assert re.search(r"<code>breaker_open</code>.*a circuit breaker was open", client)
