"""Did flow control act? llm-d's FailOpen recipe skips an unreachable scheduler silently: then no tier is enforced.

Two facts say so together: the router's flow-control outcome counter did not move over a run whose requests were
served (every request that passes flow control is counted, dispatched or not), and the priority control's twins
show no effect of priority in any tier. Then the run cannot read as if the tiers held: an error finding and a
failed run-level check, whatever the tiers' own SLOs say. The counter alone (no twins ran, or priority acted
elsewhere, e.g. in a model server's own scheduler) is a warning; a run without the router's metrics claims nothing.
"""

from __future__ import annotations

import numpy as np

from rushhour.audit import text
from rushhour.audit.crosscheck import counter_increase, counter_series
from rushhour.audit.metrics import ServerMetrics
from rushhour.audit.summary import Finding, TierSummary, Verdict
from rushhour.stacks.llmd import FLOW_OUTCOMES, GAIE_OUTCOMES
from rushhour.stacks.profile import CounterCheck

ROUTER_PREFIXES = ("llm_d_epp_", "inference_extension_")  # the router's own families: it was scraped
CHECK = "flow_control_enforced"


def flow_counted(metrics: ServerMetrics) -> float | None:
    """Requests the router's flow control counted over the run, or None when the router was not scraped."""
    if metrics.empty or not metrics.samples["name"].astype(str).str.startswith(ROUTER_PREFIXES).any():
        return None
    found = counter_series(metrics, CounterCheck(client="", metric=FLOW_OUTCOMES, alternatives=(GAIE_OUTCOMES,)))
    if found is None:  # the router was scraped, yet its counter has no series: nothing passed flow control
        return 0.0
    increase, _, _ = counter_increase(found[1], metrics.scrape_ts_ns)
    return float(np.nansum(increase.to_numpy(dtype=np.float64)))


def bypass_check(tiers: list[TierSummary], metrics: ServerMetrics) -> tuple[list[Finding], list[Verdict]]:
    """The finding, and the failed run-level check when no tier was enforced (pure)."""
    served = sum(t.attempts_by_class.get("served", 0) for t in tiers)
    counted = flow_counted(metrics)
    if counted is None or counted > 0 or served == 0:
        return [], []
    effects = {t.name: t.priority_effect.effect for t in tiers if t.priority_effect is not None}
    data = {"flow_control_counted": counted, "served": served, "priority_effect": effects}
    idle = (f"the router's flow-control counter ({FLOW_OUTCOMES}) did not move while {text.whole(served)} "
            "requests were served")
    if not effects or any(effects.values()):
        why = ("the priority control shows priority acting, so the tiers were ordered elsewhere (a model server's "
               "own priority scheduling)" if effects else
               "run with a priority control (`control:` in the scenario) to tell whether any tier was enforced")
        return [Finding(kind="flow_control_idle", severity="warning", tier=None, message=f"{idle}: {why}",
                        data=data)], []
    message = (f"flow control was bypassed: no tier was enforced. {idle[0].upper()}{idle[1:]}, and the priority "
               "control's twins show no effect of priority in any tier (llm-d's FailOpen recipe skips an "
               "unreachable scheduler silently; a router with flow control switched off looks the same)")
    finding = Finding(kind="flow_control_bypassed", severity="error", tier=None, message=message, data=data)
    verdict = Verdict(tier="run", check=CHECK, threshold=1.0, observed=counted, bound=None, judge="point",
                      passed=False, message=message)
    return [finding], [verdict]
