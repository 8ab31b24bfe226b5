"""The priority control: exact tests with known answers, pairing, and a hand-built run through the audit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import MS, RunBuilder, S

from rushhour.audit import report_table, run_audit
from rushhour.audit.control import drop_effect, pair, paired_effect, priority_effect
from rushhour.audit.stats import binomial_two_sided, mcnemar_exact, sign_test

TWO_TIERS = [{"name": "interactive", "priority": 10}, {"name": "batch", "priority": 0}]


def test_binomial_two_sided_known_answers() -> None:
    assert binomial_two_sided(0, 10) == pytest.approx(2 / 1024)
    assert binomial_two_sided(10, 10) == pytest.approx(2 / 1024)
    assert binomial_two_sided(2, 10) == pytest.approx(2 * 56 / 1024)  # P(X <= 2) = (1 + 10 + 45) / 1024
    assert binomial_two_sided(5, 10) == 1.0
    assert binomial_two_sided(0, 0) is None
    assert binomial_two_sided(0, 1) == 1.0
    # the normal approximation beyond the exact limit stays close to the exact answer at the limit
    assert binomial_two_sided(2400, 5000) == pytest.approx(binomial_two_sided(4800, 10000), abs=0.02)
    assert 0 < binomial_two_sided(4900, 10000) < 0.05  # type: ignore[operator]


def test_sign_test_drops_ties_and_nans() -> None:
    below, above, ties, p = sign_test([-1.0, -2.0, -3.0, 0.0, 4.0, math.nan])
    assert (below, above, ties) == (3, 1, 1)
    assert p == pytest.approx(binomial_two_sided(1, 4))
    assert sign_test([]) == (0, 0, 0, None)


def test_mcnemar_uses_only_discordant_pairs() -> None:
    assert mcnemar_exact(8, 0) == pytest.approx(2 / 256)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 0) is None


def test_paired_effect_median_change_and_significance() -> None:
    tier = np.array([100.0] * 12) * MS
    control = np.array([250.0] * 12) * MS
    eff = paired_effect(tier, control)
    assert eff.n == 12 and eff.lower == 12 and eff.higher == 0
    assert eff.change == pytest.approx(-0.6)
    assert eff.p_value == pytest.approx(2 / 4096) and eff.significant
    same = paired_effect(np.arange(10.0), np.arange(10.0)[::-1])
    assert not same.significant and same.change == pytest.approx(0.0)
    assert paired_effect(np.array([]), np.array([])).n == 0


def test_drop_effect_points_and_mcnemar() -> None:
    t = np.array([True] * 10 + [False] * 10)
    c = np.array([False] * 10 + [False] * 10)
    eff = drop_effect(t, c)
    assert eff.n == 20 and eff.only_tier == 10 and eff.only_control == 0
    assert eff.difference == pytest.approx(0.5) and eff.significant


def test_pair_joins_by_twin_of_and_leaves_out_unsent_halves() -> None:
    own = pd.DataFrame({"logical_id": ["a", "b", "c"], "cls": ["served", "queue_full", "not_sent"],
                        "unserved": [False, True, False], "ttft_ns": [1.0, np.nan, np.nan],
                        "ttft_intended_ns": [2.0, np.nan, np.nan]})
    twins = pd.DataFrame({"logical_id": ["x", "y", "z", "w"], "cls": ["served", "served", "served", "served"],
                          "unserved": [False] * 4, "ttft_ns": [3.0, 4.0, 5.0, 6.0],
                          "ttft_intended_ns": [4.0, 5.0, 6.0, 7.0]})
    link = pd.DataFrame({"logical_id": ["x", "y", "z", "w", "x"], "twin_of": ["a", "b", "c", "gone", "a"]})
    pairs = pair(own, twins, link)
    assert list(pairs["logical_id"]) == ["a", "b"]  # c was not sent; w's original is not in this tier
    assert list(pairs["ttft_ns_c"]) == [3.0, 4.0]
    effect = priority_effect("interactive", pairs, "neutral")
    assert effect.pairs == 2 and effect.ttft.n == 1 and effect.drops.only_tier == 1


def _control_run(root: Path, *, faster_ms: int, slower_ms: int, n: int = 30) -> Path:
    """interactive answers in ``faster_ms``, its twins in ``slower_ms``; batch the other way round."""
    b = RunBuilder(root, profile="vllm", tiers=TWO_TIERS, scenario_extra={"control": {"share": 1.0}})
    for i in range(n):
        for tier, own_ms, twin_ms in (("interactive", faster_ms, slower_ms), ("batch", slower_ms, faster_ms)):
            t0 = i * S
            lid = f"{tier}-{i}"
            b.request(tier=tier, tenant=f"{tier}-t0", persona=f"chat-{tier}", logical_id=lid, sent_ns=t0,
                      first_token_ns=t0 + own_ms * MS)
            if tier == "batch" and i < 10:  # ten batch requests turned away, their twins served
                b.dropped(status=503, error="The engine is currently busy and cannot accept new requests",
                          tier=tier, tenant=f"{tier}-t0", persona=f"chat-{tier}", logical_id=f"{lid}-extra",
                          sent_ns=t0 + 1)
                b.dropped(status=503, error="The engine is currently busy and cannot accept new requests",
                          tier=tier, tenant=f"{tier}-t0", persona=f"chat-{tier}", logical_id=f"{lid}-twinned",
                          sent_ns=t0 + 2)
                b.request(tier=tier, tenant=f"{tier}-t0", persona=f"chat-{tier}", logical_id=f"{lid}-tw2",
                          twin_of=f"{lid}-twinned", control=True, sent_ns=t0 + 2, first_token_ns=t0 + 2 + 50 * MS)
            b.request(tier=tier, tenant=f"{tier}-t0", persona=f"chat-{tier}", logical_id=f"{lid}-tw",
                      twin_of=lid, control=True, sent_ns=t0, first_token_ns=t0 + twin_ms * MS)
    return b.close()


def test_audit_reports_the_effect_and_keeps_twins_out_of_tier_figures(tmp_path: Path) -> None:
    summary = run_audit(_control_run(tmp_path, faster_ms=100, slower_ms=400))
    tiers = {t.name: t for t in summary.tiers}
    inter, batch = tiers["interactive"], tiers["batch"]
    assert inter.requests == 30 and batch.requests == 50  # 30 + 10 extra drops + 10 twinned drops; no twin
    assert inter.latency.ttft_ms.p50 == pytest.approx(100, abs=1)  # the twins' 400 ms are not in it
    eff = inter.priority_effect
    assert eff is not None and eff.pairs == 30 and eff.effect
    assert eff.ttft.change == pytest.approx(-0.75) and eff.ttft.p_value is not None and eff.ttft.p_value < 0.001
    assert "TTFT -75 % (p < 0.001)" in eff.message and "vs equal-priority control" in eff.message
    assert "body priority 5" in eff.control
    beff = batch.priority_effect
    assert beff is not None and beff.pairs == 40
    assert beff.ttft.change == pytest.approx(3.0)
    assert beff.drops.only_tier == 10 and beff.drops.difference == pytest.approx(0.25) and beff.drops.significant
    assert "not served +25.0 pt" in beff.message


def test_audit_says_when_priority_had_no_measurable_effect(tmp_path: Path) -> None:
    summary = run_audit(_control_run(tmp_path, faster_ms=200, slower_ms=200, n=12))
    eff = summary.tiers[0].priority_effect
    assert eff is not None and not eff.effect
    assert eff.message.startswith("interactive: no measurable effect of priority: TTFT +0 % (p: –)")
    assert "n = 12 pairs" in eff.message


def test_runs_without_a_control_have_no_effect_field(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, profile="vllm", tiers=TWO_TIERS)
    b.request(tier="interactive")
    summary = run_audit(b.close())
    assert all(t.priority_effect is None for t in summary.tiers)


def test_a_tier_at_the_neutral_priority_is_named_as_having_no_contrast(tmp_path: Path) -> None:
    tiers = [{"name": "interactive", "priority": 10}, {"name": "batch", "priority": 0}]
    b = RunBuilder(tmp_path, profile="vllm", tiers=tiers, scenario_extra={"control": {"share": 1.0, "priority": 0}})
    b.request(tier="batch", tenant="batch-t0", persona="chat-batch", logical_id="b1")
    b.request(tier="batch", tenant="batch-t0", persona="chat-batch", logical_id="b1-tw", twin_of="b1", control=True)
    eff = run_audit(b.close()).tiers[1].priority_effect
    assert eff is not None and eff.pairs == 1 and "no contrast by construction" in eff.control


def test_reports_show_the_control(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from rushhour.reports.html import render_html
    from rushhour.reports.markdown import render_markdown
    from rushhour.reports.terminal import print_terminal

    run_dir = _control_run(tmp_path, faster_ms=100, slower_ms=400)
    summary = run_audit(run_dir)
    md = render_markdown(summary)
    assert "### Did priority do anything? (equal-priority control)" in md
    assert "| interactive | 30 | 100 ms vs 400 ms (-75 %, p &lt; 0.001)" in md  # escaped: renders as <
    html = render_html(summary, report_table(run_dir))
    assert 'id="priority-control"' in html and "<strong>-75 %</strong>" in html
    out = io.StringIO()
    print_terminal(summary, Console(file=out, width=200))
    assert "priority vs equal-priority control: interactive: TTFT -75 % (p < 0.001)" in out.getvalue()
