"""A chat persona's closed loop (`concurrency: N`): N sessions in flight at all times, in virtual time (the same flow
the Locust driver runs), and the dry run's estimate of it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from rushhour.loadgen.dryrun import plan
from rushhour.scenarios.model import ChatPersona, Scenario
from rushhour.sim.run import SimOptions, simulate_scenario


def scenario(concurrency: int) -> Scenario:
    return Scenario.model_validate({
        "name": "closed", "seed": 2,
        "target": {"url": "testbed", "profile": "vllm", "model": "testbed",
                   "testbed": {"preset": "tiny", "replicas": 1}},
        "tiers": [{"name": "interactive"}],
        "personas": [{"kind": "chat", "name": "chat", "tier": "interactive", "arrival": {"rate": 50},
                      "concurrency": concurrency, "turns": {"dist": "constant", "value": 1},
                      "system_prompt_tokens": 0, "prompt_tokens": {"dist": "constant", "value": 100},
                      "output_tokens": {"dist": "constant", "value": 20}}],
        "phases": [{"name": "steady", "duration": 20}], "drain_s": 5, "calibration": {"probes": 0}})


def test_n_sessions_are_in_flight_at_all_times(tmp_path: Path) -> None:
    result = simulate_scenario(scenario(3), "test", SimOptions(out_dir=tmp_path))
    lines = [json.loads(line) for p in (result.run_dir / "records").glob("*.jsonl")
             for line in p.read_text().splitlines()]
    requests = sorted((r for r in lines if r.get("kind") == "request"), key=lambda r: r["sent_ns"])
    assert len(requests) > 30 and not any(r.get("not_sent") for r in requests)  # the arrival rate (50/s) is unused
    events = sorted([(r["sent_ns"], 1) for r in requests] + [(r["done_ns"], -1) for r in requests])
    flight, peak = 0, 0
    for _, step in events:
        flight += step
        peak = max(peak, flight)
    assert peak == 3  # never more than N in flight …
    starts = Counter(r["intended_ns"] for r in requests)
    ends = Counter(r["done_ns"] for r in requests)
    # … and each user's next session is meant for the moment its last one ended (no arrival schedule): every
    # request but the users' first three starts when another ended
    assert sum((starts & ends).values()) == len(requests) - 3


def test_the_dry_run_estimates_a_closed_loop_from_the_assumed_answer_time() -> None:
    one, four = (plan(scenario(n)).personas[0] for n in (1, 4))
    assert four.requests == 4 * one.requests  # four users send four times as much …
    assert 20 / (0.5 + 20 * 0.02) * 0.99 <= one.requests <= 20 / (0.5 + 20 * 0.02) * 1.01  # … 20 s / 0.9 s each


def test_scaling_a_closed_loop_scales_its_users() -> None:
    persona = scenario(3).personas[0]
    assert isinstance(persona, ChatPersona)
    assert persona.scaled(2.0).concurrency == 6 and persona.peak_sockets(1.0) == 3.0
