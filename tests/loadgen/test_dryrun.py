"""Dry run: expected requests, tokens and cost per tier and persona; no network at all."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from rushhour.loadgen.dryrun import plan, prices_from_budget, render_plan
from rushhour.scenarios.distributions import Constant
from rushhour.scenarios.model import ChatPersona, Dataset, Scenario, Subagents

ROOT = Path(__file__).resolve().parents[2]


def scenario(**extra: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": "t",
        "tiers": [{"name": "interactive", "priority": 100}, {"name": "batch", "priority": -1}],
        "personas": [
            {
                "kind": "chat",
                "name": "chat",
                "tier": "interactive",
                "arrival": {"process": "poisson", "rate": 2.0},
                "turns": 1,
                "system_prompt_tokens": 100,
                "prompt_tokens": 50,
                "output_tokens": 20,
            },
            {
                "kind": "agent_swarm",
                "name": "agents",
                "tier": "batch",
                "agents": 4,
                "steps": 2,
                "fanout": 3,
                "tool_time_s": 1.0,
                "output_tokens": 50,
                "shared_context_tokens": 1000,
                "task_context_tokens": 0,
                "append_tokens": 150,
            },
        ],
        "phases": [
            {"name": "warm", "duration": 10, "rate_scale": 0.5},
            {"name": "peak", "duration": 20, "rate_scale": 2.0, "agents_scale": 1.0},
        ],
    }
    data.update(extra)
    return Scenario.model_validate(data)


@pytest.fixture()
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the dry run touched the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_chat_and_agent_arithmetic(no_network: None) -> None:
    p = plan(scenario(), assumed_ttft_s=0.5, assumed_tpot_s=0.01)
    chat = next(x for x in p.personas if x.persona == "chat")
    # sessions = 2/s * (0.5*10 + 2*20) = 90; one turn each; prompt = system + prompt
    assert chat.units == pytest.approx(90) and chat.requests == pytest.approx(90)
    assert chat.prompt_tokens == pytest.approx(90 * 150) and chat.output_tokens == pytest.approx(90 * 20)
    agents = next(x for x in p.personas if x.persona == "agents")
    # task time = 2 steps * (0.5 + 50*0.01 + 1.0) = 4 s; agent-seconds = 4*(0.5*10 + 1*20) = 100
    assert agents.units == pytest.approx(25)
    assert agents.requests == pytest.approx(25 * 2 * 3)
    # mean prompt over steps 0 and 1: 1000 + 0.5*(150 + 50) = 1100
    assert agents.prompt_tokens == pytest.approx(150 * 1100)
    assert p.tiers["interactive"].requests == pytest.approx(90)
    assert p.requests == pytest.approx(240)
    assert p.cost_usd is None


def test_multi_turn_context_grows() -> None:
    sc = scenario()
    chat_persona = sc.personas[0]
    assert isinstance(chat_persona, ChatPersona)
    chat_persona.turns = Constant(value=3)
    chat = next(x for x in plan(sc).personas if x.persona == "chat")
    # per session: 3*100 + 50*(1+2+3) + 20*(0+1+2) = 660
    assert chat.requests == pytest.approx(270)
    assert chat.prompt_tokens == pytest.approx(90 * 660)


def test_cost_from_budget_prices_and_warnings() -> None:
    sc = scenario(
        budget={
            "max_requests": 100,
            "price_per_mtok_in": 1.0,
            "price_per_mtok_out": 2.0,
            "per_tier": {"batch": {"price_per_mtok_in": 0.5, "max_requests": 10}},
        }
    )
    assert prices_from_budget(sc.budget, ["interactive", "batch"]) == {"interactive": (1.0, 2.0), "batch": (0.5, 2.0)}
    p = plan(sc)
    inter = p.tiers["interactive"]
    assert inter.cost_usd == pytest.approx((inter.prompt_tokens * 1.0 + inter.output_tokens * 2.0) / 1e6)
    assert p.cost_usd == pytest.approx(sum(t.cost_usd or 0 for t in p.tiers.values()))
    assert any("max_requests 100" in w for w in p.budget_warnings)
    assert any(w.startswith("tier batch") for w in p.budget_warnings)
    explicit = plan(sc, prices={"interactive": (0.0, 0.0)})
    assert explicit.tiers["interactive"].cost_usd == 0.0 and explicit.tiers["batch"].cost_usd is None


def test_trace_replay_counts_rows_in_window(no_network: None) -> None:
    from rushhour.scenarios.distributions import BUNDLED_TRACES

    trace = BUNDLED_TRACES / "AzureLLMInferenceTrace_conv.csv"
    sc = scenario(
        personas=[
            {
                "kind": "trace_replay",
                "name": "replay",
                "tier": "batch",
                "trace": str(trace),
                "time_scale": 2.0,
                "limit": 50,
                "max_prompt_tokens": 100,
            }
        ]
    )
    p = plan(sc)
    rp = p.personas[0]
    assert rp.requests == 50 and rp.prompt_tokens <= 50 * 100
    unlimited = plan(
        scenario(
            phases=[{"name": "s", "duration": 1}],
            personas=[{"kind": "trace_replay", "name": "replay", "tier": "batch", "trace": str(trace)}],
        )
    )
    assert 0 < unlimited.personas[0].requests < 100


def test_demo_scenario_renders_without_network(no_network: None) -> None:
    from rushhour.scenarios.loader import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "library" / "demo.yaml")
    p = plan(sc, prices={t.name: (1.0, 3.0) for t in sc.tiers})
    assert set(p.tiers) == {"interactive", "standard", "batch"}
    assert all(t.requests > 0 for t in p.tiers.values())
    buf = io.StringIO()
    Console(file=buf, width=160, color_system=None).print(render_plan(p))
    text = buf.getvalue()
    assert "nothing sent" in text and "interactive" in text and "cost USD" in text
    assert p.to_dict()["tiers"]["batch"]["requests"] > 0


def test_control_twins_are_planned_and_billed(no_network: None) -> None:
    """The priority control sends a share of each tier's requests again: the plan (and budget) counts them."""
    tiers = [{"name": "interactive", "priority": 100, "control": {"share": 0.5}}, {"name": "batch", "priority": -1}]
    p = plan(scenario(tiers=tiers), assumed_ttft_s=0.5, assumed_tpot_s=0.01)
    chat = next(x for x in p.personas if x.persona == "chat")
    assert chat.requests == pytest.approx(135) and chat.prompt_tokens == pytest.approx(135 * 150)
    assert any("45 equal-priority control twins" in n for n in chat.notes)
    assert next(x for x in p.personas if x.persona == "agents").requests == pytest.approx(150)  # no control there


def test_dataset_sessions_are_planned_from_the_conversations(no_network: None, tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    # two conversations, equally likely: 2 turns (user 8 bytes = 2 tokens, answers 40 bytes = 10 tokens), 1 turn
    turn = [{"from": "human", "value": "u" * 8}, {"from": "gpt", "value": "a" * 40}]
    first = [{"from": "system", "value": "s" * 8}, *turn, *turn]
    second = [{"role": "user", "content": "u" * 8}]
    data.write_text(json.dumps({"conversations": first}) + "\n" + json.dumps({"messages": second}) + "\n")
    sc = scenario()
    chat_persona = sc.personas[0]
    assert isinstance(chat_persona, ChatPersona)
    chat_persona.dataset = Dataset(path=str(data))
    chat = next(x for x in plan(sc).personas if x.persona == "chat")
    # conversation 1: turn 1 = 100 + 2 (system) + 2; turn 2 = 102 + 2 + 10 + 2; output 10 + 10
    # conversation 2: one turn 100 + 2, no answer: the persona's output_tokens (20)
    assert chat.requests == pytest.approx(90 * 1.5)
    assert chat.prompt_tokens == pytest.approx(90 * ((104 + 116) + 102) / 2)
    assert chat.output_tokens == pytest.approx(90 * (20 + 20) / 2)


def test_subagent_calls_are_planned(no_network: None) -> None:
    plain = next(x for x in plan(scenario(), assumed_ttft_s=0.5, assumed_tpot_s=0.01).personas
                 if x.persona == "agents")
    sc = scenario()
    sc.personas[1].subagents = Subagents(probability=1.0, fan_out=2, steps=3, prefix_tokens=100)  # type: ignore[union-attr]
    agents = next(x for x in plan(sc, assumed_ttft_s=0.5, assumed_tpot_s=0.01).personas if x.persona == "agents")
    # 25 tasks × (2 - 1) spawning steps × 2 sub-agents × 3 steps = 150 more calls
    assert agents.requests == pytest.approx(plain.requests + 150)
    # each: shared 1000 + brief 100 + (3 - 1) / 2 × (150 + 50)
    assert agents.prompt_tokens == pytest.approx(plain.prompt_tokens + 150 * 1300)
