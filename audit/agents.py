"""Agents on the wire per tier: requests that offered tools, answers that called one, sub-agent spawns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rushhour.audit.summary import AgentFigures


def _present(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Rows whose text column ``name`` holds a value (absent column, null and "" count as none)."""
    if name not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    col = frame[name]
    if isinstance(col.dtype, pd.CategoricalDtype):  # decided once per distinct text, mapped by code
        filled = np.append(np.asarray(col.cat.categories.astype(object) != "", dtype=bool), False)
        return filled[col.cat.codes.to_numpy()]  # code -1 (null) reads the last entry: none
    return (col.notna() & (col.astype(object) != "")).to_numpy(dtype=bool)


def agent_figures(attempts: pd.DataFrame) -> AgentFigures | None:
    """The tier's tool and sub-agent figures from its attempts; None when none offered tools or spawned."""
    offered = (attempts["tools_offered"].fillna(False).to_numpy(dtype=bool) if "tools_offered" in attempts.columns
               else np.zeros(len(attempts), dtype=bool))
    called = _present(attempts, "tool_call")
    child = _present(attempts, "parent_id")
    if not (offered.any() or called.any() or child.any()):
        return None
    codes = attempts["logical_code"].to_numpy(dtype=np.int64)
    served = attempts["served"].to_numpy(dtype=bool)
    # a served logical request has exactly one served attempt: counting served attempts counts requests
    names = attempts["tool_call"].astype(object)[called & served].value_counts()
    return AgentFigures(
        requests_with_tools=len(np.unique(codes[offered])),
        served_with_tools=int((served & offered).sum()),
        tool_call_answers=int((served & called).sum()),
        tool_calls_by_name={str(k): int(v) for k, v in names.items()},
        subagent_spawns=int(attempts["parent_id"].astype(object)[child].nunique()) if child.any() else 0,
        subagent_requests=len(np.unique(codes[child])),
    )
