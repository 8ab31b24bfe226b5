"""Client counts per tier against the EPP's own per-priority outcome counters."""

from __future__ import annotations

import numpy as np
import pandas as pd

from audit.fold import NS_PER_S, eq, isin
from audit.metrics import FLOW_OUTCOMES, GAIE_OUTCOMES, ServerMetrics, last_counters
from audit.summary import CrossCheck, Finding

# server outcome label → how the client sees it
OUTCOME_MAP = {
    "Dispatched": "admitted",
    "RejectedCapacity": "queue_full",
    "EvictedTTL": "queue_timeout",
    "RejectedNoEndpoints": "no_endpoints",
}


def _client_counts(part: pd.DataFrame) -> dict[str, int]:
    cls = part["cls"]
    status = part["status"].to_numpy(dtype=np.float64)
    admitted = ((status >= 200) & (status < 300)) | eq(cls, "preempted") | part["first_token_ns"].notna().to_numpy()
    return {
        "admitted": int(admitted.sum()),
        "queue_full": int(eq(cls, "queue_full").sum()),
        "queue_timeout": int(eq(cls, "queue_timeout").sum()),
        "no_endpoints": int(eq(part["reason"], "rejected-no-endpoints").sum()),
    }


def crosscheck(
    attempts: pd.DataFrame, priorities: dict[str, int], metrics: ServerMetrics
) -> tuple[list[CrossCheck], list[Finding]]:
    """Compare per tier; attempts still undecided at the last scrape are the tolerance."""
    if metrics.empty or len(attempts) == 0:
        return [], []
    sent = attempts[~attempts["not_sent"]]
    if "route" in sent.columns:  # the scraped metrics are the primary's: fallback routes are other stacks
        sent = sent[(sent["route"].astype(object).fillna("primary") == "primary").to_numpy()]
    first_ns = float(np.nanmin(sent["sent_ns"].to_numpy(dtype=np.float64))) if len(sent) else None
    counters, last_s = last_counters(metrics, FLOW_OUTCOMES, first_ns)
    metric_name = FLOW_OUTCOMES[0]
    if len(counters) == 0:
        counters, last_s = last_counters(metrics, GAIE_OUTCOMES, first_ns)
        metric_name = GAIE_OUTCOMES[0]
    if len(counters) == 0 or last_s is None:
        return [], []
    checks: list[CrossCheck] = []
    findings: list[Finding] = []
    by_priority: dict[int, list[str]] = {}
    for tier, prio in priorities.items():
        by_priority.setdefault(prio, []).append(tier)
    for prio, tiers in sorted(by_priority.items(), reverse=True):
        part = sent[isin(sent["tier"], tiers)]
        client = _client_counts(part)
        pending = int((part["t_end_ns"].to_numpy(dtype=np.float64) > last_s * NS_PER_S).sum())
        rows = counters[counters["priority"].astype(str) == str(prio)]
        for outcome, key in OUTCOME_MAP.items():
            server = float(rows.loc[rows["outcome"] == outcome, "value"].sum())
            if server == 0 and client[key] == 0:
                continue
            ok = abs(client[key] - server) <= pending
            label = "+".join(tiers)
            checks.append(CrossCheck(tier=label, priority=prio, metric=f"{metric_name}{{outcome={outcome}}}",
                                     client=client[key], server=server, matches=ok))
            if not ok:
                findings.append(Finding(
                    kind="crosscheck", severity="warning", tier=label,
                    message=f"{label}: client counted {client[key]} {key} but the server reports {server:.0f} "
                            f"{outcome} for priority {prio} (tolerance {pending} in flight at the last scrape)",
                    data={"priority": prio, "outcome": outcome, "client": client[key], "server": server,
                          "in_flight_tolerance": pending},
                ))
    return checks, findings
