"""Agent tasks and chat sessions (``task`` lines): completion, deadlines, makespan, why they failed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
import pandas as pd

from rushhour.audit.fold import NS_PER_S
from rushhour.audit.stats import percentiles, wilson
from rushhour.audit.summary import TaskStats
from rushhour.scenarios.kinds import every_kind

# what each persona kind's ``task`` lines are, by its ``kind``: agent tasks (deadlines, makespan) or chat sessions
TASK_UNITS: Mapping[str, Literal["agent", "session"]] = every_kind(
    {"chat": "session", "agent_swarm": "agent", "trace_replay": "session", "agent_trace": "agent"}, __name__)
AGENT_KINDS = tuple(k for k, unit in TASK_UNITS.items() if unit == "agent")


def split_kinds(tasks: pd.DataFrame, persona_kinds: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Agent tasks vs chat sessions, by the persona's kind in the scenario (else by name and session id)."""
    if len(tasks) == 0:
        return tasks, tasks
    persona = tasks["persona"].astype(object)
    known = persona.map(persona_kinds)
    # Without the scenario: a line with a session id and no agent-like persona name is a chat session.
    guess = np.where(persona.astype(str).str.contains("agent|swarm", case=False), "agent_swarm",
                     np.where(tasks["session_id"].astype(object).fillna("") != "", "chat", "agent_swarm"))
    kind = pd.Series(np.where(known.notna(), known.astype(object), guess), index=tasks.index)
    agents = kind.isin(AGENT_KINDS)
    return tasks[agents], tasks[~agents]


def task_stats(tasks: pd.DataFrame, logical: pd.DataFrame) -> TaskStats | None:
    """Completion and deadline figures for one tier's tasks; failing classes from their requests.

    A task that finished after its deadline counts as a deadline miss even if the generator wrote
    ``completed``; cancelled tasks (the run stopped) leave the denominators.
    """
    if len(tasks) == 0:
        return None
    outcome = tasks["outcome"].astype(object).fillna("").to_numpy()
    start = tasks["start_ns"].to_numpy(dtype=np.float64)
    end = tasks["end_ns"].to_numpy(dtype=np.float64)
    deadline = tasks["deadline_ns"].to_numpy(dtype=np.float64)
    late = np.isfinite(deadline) & np.isfinite(end) & (end > deadline)
    cancelled = outcome == "cancelled"
    missed = (outcome == "deadline_missed") | (late & ~cancelled)
    completed = (outcome == "completed") & ~missed
    failed = ~completed & ~missed & ~cancelled
    judged = int((~cancelled).sum())
    makespan = np.where(np.isfinite(end), end - start, np.nan)
    ideal = tasks["ideal_ns"].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        inflation = makespan / ideal
    inflation = inflation[completed & np.isfinite(inflation) & (ideal > 0)]
    return TaskStats(
        n=len(tasks),
        completed=int(completed.sum()),
        failed=int(failed.sum()),
        deadline_missed=int(missed.sum()),
        cancelled=int(cancelled.sum()),
        completion_rate=wilson(int(completed.sum()), judged),
        deadline_miss_rate=wilson(int(missed.sum()), judged),
        makespan_s=percentiles(makespan[~cancelled] / NS_PER_S),
        makespan_inflation_p50_x=float(np.median(inflation)) if len(inflation) else None,
        failed_by_class=_failing_classes(tasks[failed | missed], logical),
        # a miss the generator wrote had a deadline even when the line lost it
        with_deadline=int(((np.isfinite(deadline) | (outcome == "deadline_missed")) & ~cancelled).sum()),
    )


def _failing_classes(bad: pd.DataFrame, logical: pd.DataFrame) -> dict[str, int]:
    """For each failed or late task, the class of its first request that was not served."""
    if len(bad) == 0:
        return {}
    ids = set(bad["task_id"].astype(object))
    reqs = logical[logical["task_id"].astype(object).isin(ids) & ~logical["served"]] if len(logical) else logical
    out: dict[str, int] = {}
    found: set[object] = set()
    if len(reqs):
        firsts = reqs.sort_values("first_intended_ns").drop_duplicates("task_id")
        counts = firsts["cls"].astype(object).value_counts()
        out = {str(k): int(v) for k, v in counts.items()}
        found = set(firsts["task_id"].astype(object))
    # Tasks whose failing call is not in the records (e.g. a lost shard): the generator's own word.
    rest = bad[~bad["task_id"].astype(object).isin(found)]
    for text, count in rest["first_failure"].astype(object).fillna("late").value_counts().items():
        out[str(text)] = out.get(str(text), 0) + int(count)
    return out
