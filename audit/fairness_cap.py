"""A router's per-tenant metrics stop at a label cap: say when the run's tenants went past it (pure).

llm-d's metrics keep at most 1,000 ``fairness_id`` values and count every later tenant under ``other``
(llm-d-router docs/metrics.md). A run with more tenants than that cannot be read per tenant from the router's
``/metrics``: those series are partial. rushhour's own per-tenant figures come from its records and are whole.
"""

from __future__ import annotations

import json

from rushhour.audit.metrics import ServerMetrics
from rushhour.audit.summary import Finding
from rushhour.stacks.profile import Metrics

OTHER = "other"


def label_values(metrics: ServerMetrics, label: str) -> set[str]:
    """Distinct values of ``label`` on the per-tenant families the run scraped (audit/metrics.py keeps their label
    sets)."""
    values: set[str] = set()
    for key in metrics.tenant_label_sets:
        value = json.loads(key).get(label)
        if value is not None:
            values.add(str(value))
    return values


def fairness_cap_finding(tenants: set[str], stack: Metrics, metrics: ServerMetrics) -> Finding | None:
    """The warning when the run's tenants outnumber the stack's fairness label cap, or its metrics lumped some."""
    cap, label = stack.fairness_cap, stack.fairness_label
    if cap is None or label is None:
        return None
    seen = label_values(metrics, label)
    lumped = OTHER in seen and OTHER not in tenants
    if len(tenants) <= cap and not lumped:
        return None
    shown = (f"; its /metrics showed {len(seen):,} {label} values, `{OTHER}` among them" if lumped
             else f"; its /metrics showed {len(seen):,} {label} values" if seen else "")
    message = (f"the run sent {len(tenants):,} tenants, and the router's metrics keep at most "
               f"{cap:,} {label} values, counting later tenants under `{OTHER}`{shown}: per-tenant "
               "figures from the router's /metrics are partial (rushhour's per-tenant figures come from its own "
               "records and are whole)")
    return Finding(kind="fairness_id_capped", severity="warning", tier=None, message=message,
                   data={"tenants": len(tenants), "cap": cap, "label_values_seen": len(seen), "other_seen": lumped})
