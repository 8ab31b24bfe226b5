"""Agents on the wire per tier: requests offering tools, answers calling one, sub-agent spawns (pure)."""

from __future__ import annotations

import pandas as pd

from rushhour.audit.agents import agent_figures


def _attempts(rows: list[tuple[int, bool, bool, str | None, str]]) -> pd.DataFrame:
    """(logical code, served, tools offered, tool called, parent id) per attempt."""
    return pd.DataFrame({
        "logical_code": [r[0] for r in rows],
        "served": [r[1] for r in rows],
        "tools_offered": [r[2] for r in rows],
        "tool_call": pd.Series([r[3] for r in rows], dtype="category"),
        "parent_id": pd.Series([r[4] for r in rows], dtype="category"),
    })


def test_counts_logical_requests_answers_and_spawns() -> None:
    frame = _attempts([
        (0, False, True, None, ""),  # a retried request offering tools: 429, then served with a call
        (0, True, True, "read_file", ""),
        (1, True, True, "read_file", ""),
        (2, True, True, None, ""),  # answered with text
        (3, False, True, None, ""),  # never served
        (4, True, True, "edit_file", "L1"),  # two sub-agents of one spawn, one of another
        (5, True, True, None, "L1"),
        (6, True, True, "run_command", "L2"),
        (7, True, False, None, ""),  # a chat request in the same tier
    ])
    a = agent_figures(frame)
    assert a is not None
    assert a.requests_with_tools == 7 and a.served_with_tools == 6 and a.tool_call_answers == 4
    assert a.tool_calls_by_name == {"read_file": 2, "edit_file": 1, "run_command": 1}
    assert a.subagent_spawns == 2 and a.subagent_requests == 3


def test_a_tier_without_tools_or_sub_agents_has_none() -> None:
    assert agent_figures(_attempts([(0, True, False, None, ""), (1, False, False, None, "")])) is None
    # records written before the field existed: the columns are absent or null
    old = pd.DataFrame({"logical_code": [0], "served": [True], "tools_offered": [None]})
    assert agent_figures(old) is None
