"""Tokens, spend and budget use per tier, priced only where the price table says so.

The run's price table (``budget.price_per_mtok_in``/``_out``) prices the tiers on the vendor's
default service tier; a tier on another service tier (``flex``, ``priority``, …) has a price only
through its own ``budget.per_tier`` row. Without one its spend is "no price", never the default's
price (flex costs less, priority more). Tokens are the server's own usage counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from rushhour.audit.fold import eq
from rushhour.audit.summary import Spend, TierSpend

DEFAULT_SERVICE_TIERS = (None, "", "default", "auto")
LIMITS = {"max_requests": "requests", "max_tokens": "tokens", "max_cost_usd": "cost_usd"}


def tier_price(budget: Mapping[str, Any] | None, tier: Mapping[str, Any]
               ) -> tuple[float | None, float | None, str | None, str | None]:
    """(price in, price out, 'tier' or 'run', why there is none) of one tier (per million tokens)."""
    budget = budget or {}
    name = str(tier.get("name", ""))
    run_in, run_out = budget.get("price_per_mtok_in"), budget.get("price_per_mtok_out")
    own = (budget.get("per_tier") or {}).get(name) or {}
    own_in, own_out = own.get("price_per_mtok_in"), own.get("price_per_mtok_out")
    if own_in is not None or own_out is not None:
        return (own_in if own_in is not None else run_in or 0.0,
                own_out if own_out is not None else run_out or 0.0, "tier", None)
    service = tier.get("service_tier")
    if run_in is None and run_out is None:
        return None, None, None, "no price table (budget.price_per_mtok_in/out)"
    if service not in DEFAULT_SERVICE_TIERS:
        return None, None, None, (f"no price for service tier {service!r}: the price table has no budget.per_tier."
                                  f"{name} row, and the run's prices are the default tier's")
    return run_in or 0.0, run_out or 0.0, "run", None


def _limits(scope: Mapping[str, Any] | None) -> dict[str, float]:
    return {k: float(v) for k, v in (scope or {}).items() if k in LIMITS and isinstance(v, int | float)}


def _used(usage: Mapping[str, Any] | None) -> dict[str, float]:
    found = usage or {}
    return {k: float(found[k]) for k in ("requests", "tokens", "cost_usd") if isinstance(found.get(k), int | float)}


def _share(limits: Mapping[str, float], used: Mapping[str, float]) -> dict[str, float]:
    return {k: used[LIMITS[k]] / v for k, v in limits.items() if v > 0 and LIMITS[k] in used}


def _tokens(attempts: pd.DataFrame, column: str, mask: np.ndarray) -> tuple[int, np.ndarray]:
    if column not in attempts.columns:
        return 0, np.zeros(len(attempts), dtype=bool)
    values = pd.to_numeric(attempts[column], errors="coerce").to_numpy(dtype=np.float64)
    have = mask & np.isfinite(values)
    return int(values[have].sum()), have


def spend(attempts: pd.DataFrame, scenario: Mapping[str, Any] | None, budget_usage: Mapping[str, Any] | None
          ) -> Spend:
    """Per tier: the server-reported tokens, the tier's price (or why none), spend and budget use."""
    scenario = scenario or {}
    budget = scenario.get("budget") or None
    usage = budget_usage or {}
    out = Spend()
    for tier in scenario.get("tiers") or []:
        name = str(tier.get("name", ""))
        mask = eq(attempts["tier"], name) if len(attempts) else np.zeros(0, dtype=bool)
        prompt, have_p = _tokens(attempts, "prompt_tokens", mask)
        output, have_o = _tokens(attempts, "output_tokens", mask)
        p_in, p_out, source, why = tier_price(budget, tier)
        cost = None if p_in is None or p_out is None else round((prompt * p_in + output * p_out) / 1e6, 6)
        limits = _limits(((budget or {}).get("per_tier") or {}).get(name))
        used = _used((usage.get("tiers") or {}).get(name))
        row = TierSpend(tier=name, service_tier=tier.get("service_tier"),
                        attempts_with_usage=int((have_p | have_o).sum()), prompt_tokens=prompt, output_tokens=output,
                        price_per_mtok_in=p_in, price_per_mtok_out=p_out, price_from=source, cost_usd=cost,
                        no_price=why, budget_limits=limits, budget_used=used, budget_share=_share(limits, used))
        out.tiers.append(row)
        out.prompt_tokens += prompt
        out.output_tokens += output
        if cost is not None:
            out.cost_usd = round((out.cost_usd or 0.0) + cost, 6)
        elif prompt or output:
            out.unpriced_tiers.append(name)
    out.budget_limits = _limits(budget)
    out.budget_used = _used(usage.get("run"))
    out.budget_share = _share(out.budget_limits, out.budget_used)
    reached = usage.get("run", {}).get("reached_by") if isinstance(usage.get("run"), dict) else None
    out.budget_reached = [str(r) for r in reached] if isinstance(reached, list) else []
    if out.unpriced_tiers and out.budget_limits.get("max_cost_usd") is not None:
        out.notes.append(f"the budget guard counted {', '.join(out.unpriced_tiers)} at the run's prices while it "
                         "ran (a ceiling for a cheaper service tier): its cost_usd use is an upper bound")
    if out.unpriced_tiers:
        out.notes.append(f"no price for {', '.join(out.unpriced_tiers)}: the total spend leaves them out "
                         "(add a budget.per_tier row with price_per_mtok_in/out)")
    return out
