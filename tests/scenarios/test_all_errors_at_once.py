"""A scenario's problems come in one report: field errors and broken names together, each located, each with
the nearest valid name, the case to use or the unit wanted."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import rushhour

from rushhour.scenarios import ScenarioError, parse_scenario
from rushhour.scenarios.loader import validate_data
from rushhour.scenarios.names import did_you_mean

BROKEN = """\
name: broken
target: {url: testbed, profile: vLLM}
tiers:
  - name: interactive
    priority: 10
    slo: {ttft_ms: {p99: 2s}, phases: {peek: {ttft_ms: {p50: 100}}}}
  - name: batch
    priority: -1
    prioriti: 3
personas:
  - {kind: chat, name: chat, tier: interactve, arrival: {rate: 2}}
  - {kind: agent_swarm, name: agents, tier: Batch, agents: 0}
  - {kind: chat, name: chat, tier: gold, arrival: {rate: 1}}
phases:
  - {name: peak, duration: 10}
budget: {per_tier: {batchh: {max_requests: 5}}}
"""

EXPECTED = [
    "b.yaml:2: target.profile: 'vLLM' is not one of",
    "b.yaml:6: tiers.0.slo.ttft_ms.p99: '2s' is not a number — milliseconds expected: 2000",
    "b.yaml:6: tiers.0.slo.phases.peek: unknown phase 'peek' — did you mean 'peak'?",
    "b.yaml:9: tiers.1.prioriti: unknown key 'prioriti' — did you mean 'priority'?",
    "b.yaml:11: personas.0.tier: unknown tier 'interactve' — did you mean 'interactive'?",
    "b.yaml:12: personas.1.agent_swarm.agents: Input should be greater than or equal to 1",
    "b.yaml:12: personas.1.tier: unknown tier 'Batch' — names are case-sensitive: 'batch'",
    "b.yaml:13: personas.2.name: persona name 'chat' is used twice — names must be unique",
    "b.yaml:13: personas.2.tier: unknown tier 'gold' — tiers: interactive, batch",
    "b.yaml:16: budget.per_tier.batchh: unknown tier 'batchh' — did you mean 'batch'?",
]


def test_field_and_name_errors_come_together_each_located() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(BROKEN, "b.yaml")
    lines = [line.strip() for line in str(info.value).splitlines()[1:]]
    assert len(lines) == len(EXPECTED), str(info.value)
    for line, expected in zip(lines, EXPECTED, strict=True):
        assert line.startswith(expected), (line, expected)
    assert "names are case-sensitive: 'vllm'" in lines[0]
    assert "top level" not in str(info.value) and "Value error" not in str(info.value)


def test_a_broken_name_alone_is_located_too() -> None:
    valid = "\n".join(BROKEN.splitlines()[:8]) + (
        "\npersonas:\n  - {kind: chat, name: c, tier: interactve, arrival: {rate: 2}}\n")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(valid.replace("vLLM", "vllm").replace("2s", "2000"), "v.yaml")
    assert str(info.value).splitlines()[1:] == [
        "  v.yaml:6: tiers.0.slo.phases.peek: unknown phase 'peek' — phases: steady",  # the default phase
        "  v.yaml:10: personas.0.tier: unknown tier 'interactve' — did you mean 'interactive'?",
    ]


def test_a_scenario_built_in_code_names_the_broken_reference() -> None:
    data = {"name": "x", "tiers": [{"name": "gold"}],
            "personas": [{"kind": "chat", "name": "c", "tier": "golden", "arrival": {"rate": 1}}]}
    with pytest.raises(ScenarioError, match=r"personas\.0\.tier: unknown tier 'golden' \(did you mean 'gold'\?\)"):
        validate_data(data, "--scale 2")


def test_arrivals_without_a_rate_is_located_at_its_persona() -> None:
    text = BROKEN.replace("agents: 0}", "agents: 2, start: arrivals}").replace("vLLM", "vllm")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "b.yaml")
    assert "b.yaml:12: personas.1.agent_swarm: start 'arrivals' needs task_rate" in str(info.value)


def test_nearest_name() -> None:
    assert did_you_mean("vLLM", ["llm-d", "vllm"]) == "names are case-sensitive: 'vllm'"
    assert did_you_mean("demoo", ["demo", "ci-smoke"]) == "did you mean 'demo'?"
    assert did_you_mean("zzz", ["demo"]) == ""


def test_scenario_check_prints_them_all_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(BROKEN)
    done = rushhour("scenario", "check", "b.yaml", cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "invalid scenario b.yaml (10 problems):" in done.stderr
    for expected in EXPECTED:
        assert expected in done.stderr, expected


def test_limits_spanning_fields_come_with_the_field_errors_located() -> None:
    text = """\
name: spans
tiers:
  - {name: a, prioriti: 1}
personas:
  - {kind: chat, name: c, tier: a, arrival: {rate: 5000}}
  - {kind: agent_swarm, name: s, tier: a, agents: 5000}
phases:
  - {name: warm-up, duration: 5, measure: false}
  - {name: burst, duration: 5, rate_scale: 3, measure: false}
"""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "s.yaml")
    lines = [line.strip() for line in str(info.value).splitlines()[1:]]
    assert lines == [
        "s.yaml:3: tiers.0.prioriti: unknown key 'prioriti' — did you mean 'priority'?",
        "s.yaml:5: personas.0.arrival.rate: persona 'c' in phase 'burst': rate 5000/s × scale 3 is over the limit "
        "of 10,000 arrivals/s",
        "s.yaml:6: personas.1.agents: persona 's' in phase 'burst': 15,000 agents is over the limit of 10,000",
        "s.yaml:7: phases: every phase has measure: false: nothing would be judged — measure at least one",
    ], lines


def test_problems_found_after_loading_are_located_too(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("""\
name: t
tiers:
  - {name: a}
  - {name: gold, credential: env:RUSHHOUR_TEST_UNSET_KEY}
personas:
  - {kind: trace_replay, name: r, tier: a, trace: mooncake_trace.jsonl}
""")
    env: dict[str, str | None] = {"RUSHHOUR_TEST_UNSET_KEY": None}  # unset in the child, whatever the parent has
    check = rushhour("scenario", "check", "t.yaml", cwd=tmp_path, timeout=60, env=env)
    assert check.returncode == 2
    assert ("t.yaml:6: personas.0.trace: trace file 'mooncake_trace.jsonl' not found — did you mean "
            "'mooncake_fast25_conversation_trace.jsonl'?") in check.stderr, check.stderr
    fixed = (tmp_path / "t.yaml").read_text().replace("mooncake_trace", "mooncake_fast25_conversation_trace")
    (tmp_path / "t.yaml").write_text(fixed)
    dry = rushhour("run", "t.yaml", "--dry-run", cwd=tmp_path, timeout=60, env=env)
    assert dry.returncode == 2
    assert "t.yaml:4: tiers.gold: tier 'gold': environment variable RUSHHOUR_TEST_UNSET_KEY" in dry.stderr, dry.stderr
