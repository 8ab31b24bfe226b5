"""Users who gave up: abandoned logical requests per persona (the session SLA ``max_abandon_rate``)."""

from __future__ import annotations

import pandas as pd

from rushhour.audit.fold import eq, judged


def abandoned_by_persona(logical: pd.DataFrame) -> dict[str, int]:
    """Persona → logical requests whose final class is ``abandoned`` (judged requests only)."""
    if len(logical) == 0 or "persona" not in logical.columns:
        return {}
    mask = eq(logical["cls"], "abandoned") & judged(logical).to_numpy()
    counts = logical.loc[mask, "persona"].astype(object).fillna("").value_counts()
    return {str(k): int(v) for k, v in counts.items()}
