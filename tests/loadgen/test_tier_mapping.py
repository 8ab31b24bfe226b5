"""Tier → headers/body/credentials per stack profile (priority polarity!)."""

from __future__ import annotations

import pytest

from rushhour.loadgen.tiers import TierError, map_all, map_tier, priority_field
from rushhour.scenarios.model import Tier

INTERACTIVE = Tier(name="interactive", priority=100, tenants=2)
BATCH = Tier(name="batch", priority=-1, objective="batch-sheddable")


@pytest.mark.parametrize("profile", ["llm-d", "testbed", "headroom", "fifo"])
def test_llmd_family_headers(profile: str) -> None:
    wire = map_tier(BATCH, "acme", profile, "openai-chat")
    assert wire.headers == {"x-llm-d-inference-objective": "batch-sheddable", "x-llm-d-inference-fairness-id": "acme"}
    assert wire.body == {}


def test_objective_defaults_to_tier_name() -> None:
    assert map_tier(INTERACTIVE, "t", "llm-d", "openai-chat").headers["x-llm-d-inference-objective"] == "interactive"


def test_gaie_v1_headers() -> None:
    wire = map_tier(INTERACTIVE, "t0", "gaie-v1", "openai-chat")
    assert wire.headers == {"x-gateway-inference-objective": "interactive", "x-gateway-inference-fairness-id": "t0"}


def test_smg_header() -> None:
    assert map_tier(Tier(name="bulk", priority=-5), "t", "smg", "openai-chat").headers == {"x-smg-priority": "bulk"}


def test_priority_polarity() -> None:
    # rushhour: higher = more urgent. vLLM: lower = more urgent. SGLang (default): higher = more urgent.
    assert map_tier(INTERACTIVE, "t", "vllm", "openai-chat").body == {"priority": -100}
    assert map_tier(BATCH, "t", "vllm", "openai-chat").body == {"priority": 1}
    assert map_tier(INTERACTIVE, "t", "sglang", "openai-chat").body == {"priority": 100}
    vllm_order = sorted([INTERACTIVE, BATCH], key=lambda t: priority_field("vllm", t) or 0)
    assert vllm_order[0].name == "interactive"  # vLLM serves the lowest value first
    sglang_order = sorted([INTERACTIVE, BATCH], key=lambda t: -(priority_field("sglang", t) or 0))
    assert sglang_order[0].name == "interactive"
    assert priority_field("llm-d", INTERACTIVE) is None


def test_service_tier_and_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RH_TEST_KEY", "sk-test-0123456789abcdef")
    tier = Tier(
        name="flex",
        service_tier="flex",
        credential="env:RH_TEST_KEY",
        headers={"x-extra": "1"},
        body={"temperature": 0},
    )
    wire = map_tier(tier, "t", "openai", "openai-chat")
    assert wire.headers["authorization"] == "Bearer sk-test-0123456789abcdef"
    assert wire.headers["x-extra"] == "1"
    assert wire.body == {"service_tier": "flex", "temperature": 0}
    assert wire.key_fingerprint.startswith("fp:") and "0123" not in wire.key_fingerprint
    anth = map_tier(tier.model_copy(update={"service_tier": "standard_only"}), "t", "anthropic", "anthropic-messages")
    assert anth.headers["x-api-key"] == "sk-test-0123456789abcdef"
    assert anth.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in anth.headers and anth.body["service_tier"] == "standard_only"


def test_missing_credential_and_unknown_profile() -> None:
    with pytest.raises(TierError, match="RH_SURELY_UNSET"):
        map_tier(Tier(name="x", credential="env:RH_SURELY_UNSET"), "t", "openai", "openai-chat")
    with pytest.raises(TierError, match="unknown stack profile"):
        map_tier(INTERACTIVE, "t", "nope", "openai-chat")


def test_map_all_covers_every_tenant() -> None:
    wires = map_all([INTERACTIVE, BATCH], "llm-d", "openai-chat")
    assert set(wires) == {("interactive", "interactive-t0"), ("interactive", "interactive-t1"), ("batch", "batch-t0")}


def test_litellm_sends_priority_to_its_scheduler_and_in_extra_body_to_the_upstream() -> None:
    # LiteLLM's scheduler (lower = earlier) takes the top-level field; only extra_body reaches a vLLM behind it
    assert map_tier(INTERACTIVE, "t", "litellm", "openai-chat").body == {
        "priority": -100, "extra_body": {"priority": -100}}
    # a tier's own extra fields stay beside ours, and its own extra_body.priority wins (an SGLang upstream)
    own = Tier(name="i", priority=10, body={"extra_body": {"top_k": 5}})
    assert map_tier(own, "t", "litellm", "openai-chat").body == {
        "priority": -10, "extra_body": {"priority": -10, "top_k": 5}}
    sglang = Tier(name="i", priority=10, body={"extra_body": {"priority": 10}})
    assert map_tier(sglang, "t", "litellm", "openai-chat").body["extra_body"] == {"priority": 10}
