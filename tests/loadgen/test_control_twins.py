"""The priority control's loadgen side: which requests get a twin, and what a twin carries per stack."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rushhour.loadgen import control
from rushhour.scenarios.model import Control, Scenario, Tier


def _scenario(**extra: object) -> Scenario:
    body: dict[str, object] = {
        "name": "c", "tiers": [{"name": "interactive", "priority": 10}, {"name": "batch", "priority": 0}],
        "personas": [{"kind": "chat", "name": "p", "tier": "batch", "arrival": {"rate": 1}}],
    }
    body.update(extra)
    return Scenario.model_validate(body)


def test_share_is_honoured_and_stable() -> None:
    ids = [f"id-{i}" for i in range(20000)]
    picked = [i for i in ids if control.sampled(i, 0.1, seed=1)]
    assert 0.09 < len(picked) / len(ids) < 0.11
    assert picked == [i for i in ids if control.sampled(i, 0.1, seed=1)]  # the same request decides the same way
    assert not control.sampled("x", 0.0)
    assert all(control.sampled(i, 1.0) for i in ids[:100])
    first = sum(control.twin_first(i) for i in ids)
    assert 0.48 < first / len(ids) < 0.52  # a fair coin: a FCFS server favours neither side


def test_tier_control_overrides_the_scenarios_and_neutral_is_the_midpoint() -> None:
    sc = _scenario(control={"share": 0.2})
    assert sc.control_for("batch") == Control(share=0.2)
    assert sc.neutral_priority(Control(share=0.2)) == 5
    assert sc.neutral_priority(Control(share=0.2, priority=-3)) == -3
    own = _scenario(tiers=[{"name": "interactive", "priority": 10, "control": {"share": 0.5}},
                           {"name": "batch", "priority": -3}])
    assert own.control_for("interactive") == Control(share=0.5) and own.control_for("batch") is None
    assert own.neutral_priority(Control(share=0.5)) == 3  # (10 + -3) // 2
    with pytest.raises(ValidationError):
        _scenario(control={"share": 0})
    with pytest.raises(ValidationError):
        _scenario(control={"share": 1.5})
    with pytest.raises(ValidationError):
        _scenario(control={"share": 0.1, "typo": 1})


def test_vllm_twin_carries_the_neutral_priority_negated() -> None:
    tier = Tier(name="interactive", priority=10, headers={"x-team": "a"})
    wire = control.control_wire(tier, "t0", "vllm", "openai-chat", Control(share=1), 5)
    assert wire.body["priority"] == -5 and wire.headers["x-team"] == "a"
    assert control.control_wire(tier, "t0", "sglang", "openai-chat", Control(share=1), 5).body["priority"] == 5
    # behind LiteLLM the upstream's priority travels in extra_body: the twin's is neutral there too
    behind = control.control_wire(tier.model_copy(update={"body": {"extra_body": {"top_k": 3}}}), "t0", "litellm",
                                  "openai-chat", Control(share=1), 5).body
    assert behind["priority"] == -5 and behind["extra_body"] == {"priority": -5, "top_k": 3}


def test_header_stacks_leave_the_objective_out_unless_named() -> None:
    tier = Tier(name="interactive", priority=10, objective="premium")
    wire = control.control_wire(tier, "acme", "llm-d", "openai-chat", Control(share=1), 5)
    assert "x-llm-d-inference-objective" not in wire.headers
    assert wire.headers["x-llm-d-inference-fairness-id"] == "acme"  # the tenant is kept
    named = control.control_wire(tier, "acme", "llm-d", "openai-chat", Control(share=1, objective="std"), 5)
    assert named.headers["x-llm-d-inference-objective"] == "std"
    smg = control.control_wire(tier, "acme", "smg", "openai-chat", Control(share=1), 5)
    assert "x-smg-priority" not in smg.headers


def test_openai_twin_has_no_service_tier() -> None:
    tier = Tier(name="flex", priority=0, service_tier="flex")
    wire = control.control_wire(tier, "t0", "openai", "openai-chat", Control(share=1), 0)
    assert "service_tier" not in wire.body
