"""Prompt text (deterministic, byte-identical prefixes), seeded samplers, phases and open-loop arrivals."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from rushhour.loadgen import prompts
from rushhour.loadgen.engine.wire.dialects import build_body
from rushhour.loadgen.schedule import (
    next_arrival,
    phase_index,
    scale_phases,
    seeded_rng,
    unit_work,
    worker_share,
    worker_slots,
)
from rushhour.loadgen.workload import ideal_s, plan_task
from rushhour.scenarios import parse_scenario
from rushhour.scenarios.model import AgentSwarmPersona, Arrival, Phase


def test_text_is_deterministic_sized_and_distinct() -> None:
    a = prompts.text("k", 100)
    assert a == prompts.text("k", 100) and len(a.encode()) == 400 and a.isascii()
    assert prompts.text("other", 100)[:64] != a[:64]
    assert len(prompts.text("big", 300_000)) == 1_200_000  # longer than the base text
    assert len(prompts.text("tiny", 0)) == 4


def test_conversation_prefix_is_byte_identical_in_every_dialect() -> None:
    conv = prompts.Conversation(prompts.text("sys", 64))
    conv.append("user", prompts.text("u0", 50))
    first = conv.with_user(prompts.text("note", 4))
    conv.append("user", prompts.text("note", 4))
    conv.append("assistant", prompts.text("out", 20))
    conv.append("user", prompts.text("tool", 30))
    second = conv.with_user(prompts.text("note2", 4))
    for dialect in ("openai-chat", "openai-completions", "anthropic-messages"):
        _, b1 = build_body(dialect, "m", first, 10, True)
        _, b2 = build_body(dialect, "m", second, 10, True)
        # the bodies share everything up to the end of the first prompt's text
        text1 = first.messages[-1][1]
        cut = b1.index(text1.encode()) + len(text1)
        assert b2[:cut] == b1[:cut]
    assert second.flat().startswith(first.flat())


def test_seeded_rng_is_stable_and_distinct() -> None:
    assert seeded_rng(1, "p", 0, 3).random() == seeded_rng(1, "p", 0, 3).random()
    assert seeded_rng(1, "p", 0, 3).random() != seeded_rng(1, "p", 1, 3).random()
    assert seeded_rng(1, "p", 0, 3).random() != seeded_rng(2, "p", 0, 3).random()


def test_agent_task_plans_reproducible_by_seed() -> None:
    persona = AgentSwarmPersona(kind="agent_swarm", name="a", tier="t")
    p1 = plan_task(persona, seeded_rng(7, "a", 0, 1))
    p2 = plan_task(persona, seeded_rng(7, "a", 0, 1))
    assert p1 == p2 and ideal_s(p1) == ideal_s(p2) > 0
    assert plan_task(persona, seeded_rng(8, "a", 0, 1)) != p1


def test_phase_index() -> None:
    phases = [Phase(name="a", duration=10), Phase(name="b", duration=5)]
    assert [phase_index(phases, t) for t in (-1, 0, 9.9, 10, 14.9, 15)] == [None, 0, 0, 1, 1, None]


def test_scale_phases_proportional() -> None:
    phases = scale_phases([Phase(name="a", duration=20), Phase(name="b", duration=60)], 20)
    assert [p.duration for p in phases] == [5, 15]
    with pytest.raises(ValueError):
        scale_phases(phases, 0)


def _arrivals(arrival: Arrival, phases: list[Phase], seed: int = 1) -> list[float]:
    rng, t, out = random.Random(seed), 0.0, []
    while True:
        nxt = next_arrival(t, unit_work(arrival, rng), arrival.rate, phases)
        if nxt is None:
            return out
        out.append(nxt)
        t = nxt


def test_poisson_rate_follows_phases() -> None:
    phases = [
        Phase(name="low", duration=100, rate_scale=1),
        Phase(name="off", duration=50, rate_scale=0),
        Phase(name="high", duration=100, rate_scale=3),
    ]
    times = _arrivals(Arrival(process="poisson", rate=2), phases)
    low = sum(1 for t in times if t < 100)
    off = sum(1 for t in times if 100 <= t < 150)
    high = sum(1 for t in times if t >= 150)
    assert off == 0 and 160 < low < 240 and 520 < high < 680
    gaps = [b - a for a, b in itertools.pairwise(times) if a < 100 and b < 100]
    assert 0.8 < statistics.pstdev(gaps) / statistics.mean(gaps) < 1.2  # CV ≈ 1


def test_gamma_is_burstier_and_constant_is_regular() -> None:
    phases = [Phase(name="p", duration=500)]
    gam = _arrivals(Arrival(process="gamma", rate=2, shape=0.25), phases)
    gaps = [b - a for a, b in itertools.pairwise(gam)]
    assert statistics.pstdev(gaps) / statistics.mean(gaps) > 1.5
    const = _arrivals(Arrival(process="constant", rate=4), [Phase(name="p", duration=2)])
    assert const == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])


def test_arrivals_reproducible() -> None:
    phases = [Phase(name="p", duration=30)]
    assert _arrivals(Arrival(rate=3), phases, 5) == _arrivals(Arrival(rate=3), phases, 5)


def test_worker_shares() -> None:
    assert worker_share(9, 3) == 3
    assert [worker_slots(10, 3, i) for i in range(3)] == [4, 3, 3]
    assert worker_slots(1, 4, 3) == 1


def test_demo_scenario_loads() -> None:
    from rushhour.scenarios import load_scenario

    assert load_scenario("demo").personas
    assert parse_scenario("name: x\ntiers: [{name: a}]\npersonas: [{kind: chat, name: c, tier: a, arrival: {rate: 1}}]")
