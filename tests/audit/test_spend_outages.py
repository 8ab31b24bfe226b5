"""Spend per tier (never priced as another service tier) and scheduled outages (kept apart from saturation)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rushhour.audit.outages import outage_mask, scheduled_outages
from rushhour.audit.spend import spend, tier_price

RUN_PRICES = {"price_per_mtok_in": 0.4, "price_per_mtok_out": 1.6, "max_cost_usd": 2.0, "max_requests": 300}


def test_the_run_prices_price_the_default_service_tier_only() -> None:
    assert tier_price(RUN_PRICES, {"name": "default", "service_tier": "default"}) == (0.4, 1.6, "run", None)
    assert tier_price(RUN_PRICES, {"name": "plain"})[2] == "run"  # no service tier: the vendor's default
    p_in, p_out, source, why = tier_price(RUN_PRICES, {"name": "flex", "service_tier": "flex"})
    assert (p_in, p_out, source) == (None, None, None)  # before: flex was priced as default
    assert why is not None and "no price for service tier 'flex'" in why and "budget.per_tier.flex" in why
    own = {**RUN_PRICES, "per_tier": {"flex": {"price_per_mtok_in": 0.2}}}
    assert tier_price(own, {"name": "flex", "service_tier": "flex"}) == (0.2, 1.6, "tier", None)
    assert tier_price(None, {"name": "x"})[3] == "no price table (budget.price_per_mtok_in/out)"


def test_spend_counts_the_servers_tokens_and_budget_use() -> None:
    attempts = pd.DataFrame({"tier": ["default", "default", "flex", "flex"],
                             "prompt_tokens": [1000, 500, 2000, None], "output_tokens": [100, 50, 200, None]})
    scenario = {"tiers": [{"name": "default", "service_tier": "default"}, {"name": "flex", "service_tier": "flex"}],
                "budget": RUN_PRICES}
    usage = {"run": {"requests": 4, "tokens": 3850, "cost_usd": 0.0024},
             "tiers": {"default": {"requests": 2, "tokens": 1650}, "flex": {"requests": 2, "tokens": 2200}}}
    out = spend(attempts, scenario, usage)
    default, flex = out.tiers
    assert (default.prompt_tokens, default.output_tokens, default.attempts_with_usage) == (1500, 150, 2)
    assert default.cost_usd == round((1500 * 0.4 + 150 * 1.6) / 1e6, 6) and default.price_from == "run"
    assert (flex.prompt_tokens, flex.output_tokens, flex.attempts_with_usage) == (2000, 200, 1)
    assert flex.cost_usd is None and flex.no_price is not None and out.unpriced_tiers == ["flex"]
    assert out.cost_usd == default.cost_usd and (out.prompt_tokens, out.output_tokens) == (3500, 350)
    assert out.budget_limits == {"max_cost_usd": 2.0, "max_requests": 300.0}
    assert out.budget_share["max_requests"] == 4 / 300 and flex.budget_used == {"requests": 2.0, "tokens": 2200.0}
    assert any("upper bound" in n for n in out.notes), out.notes


def test_scheduled_outages_are_faults_that_take_every_replica_down() -> None:
    scenario = {
        "target": {"url": "testbed", "testbed": {"replicas": 2, "faults": [
            {"kind": "replica_down", "at_s": 25, "duration_s": 20, "name": "model-swap"},
            {"kind": "replica_down", "at_s": 5, "duration_s": 3, "replica": 0},  # one of two: capacity, not an outage
            {"kind": "slow_replica", "at_s": 1, "duration_s": 2},
            {"kind": "error", "at_s": 50, "rate": 1.0, "status": 503},  # every arrival refused, until the end
        ]}},
        "resilience": {"fallback": [{"name": "standby", "url": "testbed", "testbed": {
            "replicas": 1, "faults": [{"kind": "replica_down", "at_s": 2, "duration_s": 1, "replica": 0}]}}]},
    }
    found = scheduled_outages(scenario, end_s=60.0)
    assert [(o.route, o.start_s, o.end_s, o.name) for o in found] == [
        ("standby", 2.0, 3.0, "replica_down"), ("primary", 25.0, 45.0, "model-swap"), ("primary", 50.0, 60.0, "error")]
    assert "every replica down" in found[1].detail and "503" in found[2].detail
    assert scheduled_outages({"target": {"url": "http://x"}}, 60) == [] and scheduled_outages(None, 60) == []
    mask = outage_mask(found, 1.0, 60)
    assert mask[25:45].all() and not mask[24] and not mask[45] and not mask[2]  # the standby's is not the primary's
    assert np.array_equal(outage_mask(found, 1.0, 60, route="standby").nonzero()[0], [2])
