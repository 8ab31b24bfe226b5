"""The scenario model: library files validate, errors are located and helpful, sampling is seeded."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from support import rushhour

from rushhour.scenarios import ScenarioError, json_schema, load_scenario, parse_scenario
from rushhour.scenarios.distributions import Geometric, LogNormal
from rushhour.scenarios.loader import LIBRARY_DIR
from rushhour.scenarios.model import AgentSwarmPersona, ChatPersona, parse_duration

LIBRARY = sorted(LIBRARY_DIR.glob("*.yaml"))


@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_library_scenarios_validate(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.duration_s > 0
    assert {p.tier for p in scenario.personas} <= {t.name for t in scenario.tiers}


def test_library_has_the_starters() -> None:
    assert {"demo", "llm-d", "vllm-priority", "openai-flex"} <= {p.stem for p in LIBRARY}


def test_demo_has_three_llm_d_tiers() -> None:
    demo = load_scenario("demo")
    assert [(t.name, t.priority) for t in demo.tiers] == [("interactive", 100), ("standard", 0), ("batch", -1)]
    assert demo.target.is_testbed
    assert any(isinstance(p, AgentSwarmPersona) and p.tier == "batch" for p in demo.personas)


MINIMAL = """\
name: t
tiers:
  - name: gold
personas:
  - kind: chat
    name: c
    tier: gold
    arrival: {process: poisson, rate: 1}
"""


def test_defaults_come_from_the_workload_reference() -> None:
    scenario = parse_scenario(MINIMAL)
    chat = scenario.personas[0]
    assert isinstance(chat, ChatPersona)
    # Azure 2023 conv: ln-normal prompt mu 6.63 sigma 0.99, output mu 5.02 sigma 0.86
    assert isinstance(chat.prompt_tokens, LogNormal) and chat.prompt_tokens.mu == 6.63
    assert isinstance(chat.output_tokens, LogNormal) and chat.output_tokens.sigma == 0.86
    assert isinstance(chat.turns, Geometric) and chat.turns.mean_estimate() == pytest.approx(2.0, abs=0.15)


def test_errors_name_line_field_and_suggest() -> None:
    text = MINIMAL.replace("  - name: gold", "  - name: gold\n    priorty: 5").replace("kind: chat", "kind: chatt")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "s.yaml")
    message = str(info.value)
    assert "s.yaml:4: tiers.0.priorty: unknown key 'priorty' — did you mean 'priority'?" in message
    assert "s.yaml:6: personas.0: 'chatt' is not one of" in message and "did you mean 'chat'?" in message
    assert len(message.splitlines()) <= 24  # one screen


def test_nested_distribution_typo_is_located() -> None:
    text = MINIMAL + "    think_time_s: {dist: lognormal, median: 2, sigmaa: 1}\n"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "s.yaml")
    assert "s.yaml:9:" in str(info.value) and "did you mean 'sigma'?" in str(info.value)


def test_cross_references_and_credentials() -> None:
    with pytest.raises(ScenarioError, match="unknown tier 'silver'"):
        parse_scenario(MINIMAL.replace("tier: gold", "tier: silver"))
    with pytest.raises(ScenarioError, match="env:VARIABLE"):
        parse_scenario(MINIMAL.replace("  - name: gold", "  - name: gold\n    credential: sk-abc"))


def test_yaml_syntax_error_has_a_line() -> None:
    with pytest.raises(ScenarioError, match=r"s.yaml:3: .*YAML syntax"):
        parse_scenario("name: t\ntiers:\n  - name: a: b\n", "s.yaml")


def test_durations() -> None:
    assert parse_duration("90s") == 90 and parse_duration("1.5m") == 90 and parse_duration("250ms") == 0.25
    assert parse_duration(3) == 3.0
    with pytest.raises(ValueError):
        parse_duration("10x")


def test_sampling_is_seeded_and_clipped() -> None:
    dist = LogNormal(dist="lognormal", median=100, sigma=2, max=300)
    a = [dist.sample(random.Random(7)) for _ in range(3)]
    b = [dist.sample(random.Random(7)) for _ in range(3)]
    assert a == b
    draws = [dist.sample(random.Random(i)) for i in range(2000)]
    assert max(draws) == 300
    median = sorted(draws)[1000]
    assert 80 < median < 125  # median of a lognormal is e^mu


def test_empirical_from_a_real_trace() -> None:
    text = MINIMAL + (
        "    prompt_tokens: {dist: empirical, trace: AzureLLMInferenceTrace_conv.csv, column: ContextTokens}\n"
    )
    chat = parse_scenario(text).personas[0]
    assert isinstance(chat, ChatPersona)
    draws = sorted(chat.prompt_tokens.sample(random.Random(i)) for i in range(3000))
    assert 850 < draws[1500] < 1200  # the measured conv median is 1,020


def test_json_schema_is_valid_json() -> None:
    schema = json.loads(json_schema())
    assert schema["title"] == "rushhour scenario" and "tiers" in schema["properties"]


def test_cli_check_and_schema(tmp_path: Path) -> None:
    ok = rushhour("scenario", "check", "demo", timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "ok  demo" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(MINIMAL.replace("rate: 1", "rat: 1"))
    result = rushhour("scenario", "check", str(bad), timeout=60)
    assert result.returncode == 2
    assert "did you mean 'rate'?" in result.stderr
    schema = rushhour("scenario", "schema", timeout=60)
    assert json.loads(schema.stdout)["title"] == "rushhour scenario"


def test_yaml_12_booleans_so_on_is_a_key() -> None:
    text = MINIMAL + "resilience:\n  retries: {on: ['429', timeout], max_attempts: 3}\n"
    assert parse_scenario(text).resilience.retries.on == ["429", "timeout"]


def test_urls_with_credentials_are_refused() -> None:
    text = MINIMAL.replace("name: t\n", "name: t\ntarget: {url: 'http://user:sk-secret-1234567890@127.0.0.1:8000'}\n")
    with pytest.raises(ScenarioError, match="must not carry a user or password") as info:
        parse_scenario(text)
    assert "sk-secret" not in str(info.value)


def test_persona_key_typo_suggests_the_key() -> None:
    text = MINIMAL.replace("    arrival:", "    arival:")
    with pytest.raises(ScenarioError, match="unknown key 'arival' — did you mean 'arrival'"):
        parse_scenario(text)
