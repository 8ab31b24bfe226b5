"""Sub-agent plans: drawn up front with the task, counted in its ideal time, other scenarios' samples unchanged."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from rushhour.loadgen.workload import IDEAL_TPOT_S, IDEAL_TTFT_S, ideal_s, plan_task
from rushhour.scenarios.model import AgentSwarmPersona

BASE = {"kind": "agent_swarm", "name": "a", "tier": "t", "steps": 4, "fanout": 1, "tool_time_s": 0.5,
        "output_tokens": 10, "append_tokens": 20}


def test_without_subagents_the_plan_is_unchanged() -> None:
    plain = AgentSwarmPersona(**BASE)
    never = AgentSwarmPersona(**BASE, subagents={"probability": 0.0})
    p1, p2 = plan_task(plain, random.Random(1)), plan_task(never, random.Random(1))
    assert [(s.fanout, s.output_tokens, s.tool_s) for s in p1] == [(s.fanout, s.output_tokens, s.tool_s) for s in p2]
    assert all(not s.subagents for s in p1)


def test_every_step_but_the_last_spawns_and_the_ideal_waits_for_the_slowest() -> None:
    persona = AgentSwarmPersona(**BASE, subagents={"probability": 1.0, "fan_out": 3, "steps": 2, "prefix_tokens": 10})
    plan = plan_task(persona, random.Random(2))
    assert [len(s.subagents) for s in plan] == [3, 3, 3, 0]
    assert all(len(sub) == 2 and all(st.fanout == 1 for st in sub) for s in plan for sub in s.subagents)
    call = IDEAL_TTFT_S + 10 * IDEAL_TPOT_S
    sub_ideal = 2 * call + 0.5  # two calls and the tool time between them
    assert ideal_s(plan) == pytest.approx(4 * call + 3 * sub_ideal)


def test_bad_subagents_are_named() -> None:
    with pytest.raises(ValidationError, match="probability"):
        AgentSwarmPersona(**BASE, subagents={"probability": 2})
    with pytest.raises(ValidationError, match=r"fanout|fan_out"):
        AgentSwarmPersona(**BASE, subagents={"probability": 0.5, "fanout": 3})
