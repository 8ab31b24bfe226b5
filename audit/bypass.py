"""Did flow control act? llm-d's FailOpen recipe skips an unreachable scheduler silently: then no tier is enforced.

Two facts say so together: the router's flow-control outcome counter did not move over a run whose requests were
served (every request that passes flow control is counted, dispatched or not), and the priority control's twins
show no effect of priority in any tier. Then the run cannot read as if the tiers held: an error finding and a
failed run-level check, whatever the tiers' own SLOs say. The counter alone (no twins ran, or priority acted
elsewhere, e.g. in a model server's own scheduler) is a warning; a run without the router's metrics claims nothing.

The twins can only clear the router when priority *visibly* acted: a tier's own flag (p < 0.05 per test) is not
enough, because a run tests three figures per tier and, with two tiers, a fifth of runs through a router that did
nothing shows one such flag by chance (CI met one: +1 % TTFT, p = 0.04). So the bar is the family's: p below
0.05 over the number of tests made, and a change a scheduler makes, not noise (a 10 % median paired latency
change or 5 points of not served; FailOpen's twins stayed within 2.5 % in 12 runs on a loaded machine).
"""

from __future__ import annotations

import numpy as np

from rushhour.audit import text
from rushhour.audit.crosscheck import counter_increase, counter_series
from rushhour.audit.metrics import ServerMetrics
from rushhour.audit.summary import Finding, PriorityEffect, TierSummary, Verdict
from rushhour.stacks.llmd import FLOW_OUTCOMES, GAIE_OUTCOMES, ROUTER_PREFIXES
from rushhour.stacks.profile import CounterCheck

CHECK = "flow_control_enforced"
FAMILY_ALPHA = 0.05
MATERIAL_CHANGE = 0.10  # a median paired latency change this large is a scheduler's doing, not the wire's
MATERIAL_POINTS = 0.05  # likewise five points of not served between a tier and its twins


def flow_counted(metrics: ServerMetrics) -> float | None:
    """Requests the router's flow control counted over the run, or None when the router was not scraped."""
    if metrics.empty or not metrics.samples["name"].astype(str).str.startswith(ROUTER_PREFIXES).any():
        return None
    found = counter_series(metrics, CounterCheck(client="", metric=FLOW_OUTCOMES, alternatives=(GAIE_OUTCOMES,)))
    if found is None:  # the router was scraped, yet its counter has no series: nothing passed flow control
        return 0.0
    increase, _, _ = counter_increase(found[1], metrics.scrape_ts_ns)
    return float(np.nansum(increase.to_numpy(dtype=np.float64)))


def _tests(effect: PriorityEffect) -> list[tuple[float, bool]]:
    """The twins' tests of one tier: (p value, is the change material)."""
    tests = [(e.p_value, e.change is not None and abs(e.change) >= MATERIAL_CHANGE) for e in (effect.ttft, effect.wait)]
    drops = effect.drops
    tests.append((drops.p_value, drops.difference is not None and abs(drops.difference) >= MATERIAL_POINTS))
    return [(p, material) for p, material in tests if p is not None]


def priority_acted(tiers: list[TierSummary]) -> dict[str, bool] | None:
    """Per tier with twins: did priority visibly act (family-corrected and material)? None when no twins ran (pure)."""
    tests = {t.name: _tests(t.priority_effect) for t in tiers if t.priority_effect is not None}
    if not tests:
        return None
    bar = FAMILY_ALPHA / max(1, sum(len(v) for v in tests.values()))
    return {name: any(p < bar and material for p, material in found) for name, found in tests.items()}


def bypass_check(tiers: list[TierSummary], metrics: ServerMetrics) -> tuple[list[Finding], list[Verdict]]:
    """The finding, and the failed run-level check when no tier was enforced (pure)."""
    served = sum(t.attempts_by_class.get("served", 0) for t in tiers)
    counted = flow_counted(metrics)
    if counted is None or counted > 0 or served == 0:
        return [], []
    effects = priority_acted(tiers)
    data = {"flow_control_counted": counted, "served": served, "priority_acted": effects or {}}
    idle = (f"the router's flow-control counter ({FLOW_OUTCOMES}) did not move while {text.whole(served)} "
            "requests were served")
    if not effects or any(effects.values()):
        why = ("the priority control shows priority acting (family-corrected and material), so the tiers were "
               "ordered elsewhere (a model server's own priority scheduling)" if effects else
               "run with a priority control (`control:` in the scenario) to tell whether any tier was enforced")
        return [Finding(kind="flow_control_idle", severity="warning", tier=None, message=f"{idle}: {why}",
                        data=data)], []
    message = (f"flow control was bypassed: no tier was enforced. {idle[0].upper()}{idle[1:]}, and the priority "
               "control's twins show no material effect of priority in any tier (llm-d's FailOpen recipe skips an "
               "unreachable scheduler silently; a router with flow control switched off looks the same)")
    finding = Finding(kind="flow_control_bypassed", severity="error", tier=None, message=message, data=data)
    verdict = Verdict(tier="run", check=CHECK, threshold=1.0, observed=counted, bound=None, judge="point",
                      passed=False, message=message)
    return [finding], [verdict]
