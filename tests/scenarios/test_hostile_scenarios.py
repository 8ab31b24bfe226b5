"""Hostile scenario files are refused fast, in bounded memory, with a located one-line problem."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rushhour.scenarios import ScenarioError, load_scenario, parse_scenario
from rushhour.scenarios.loader import MAX_DEPTH, MAX_NODES
from rushhour.scenarios.model import MAX_AGENTS, MAX_RATE, MAX_TENANTS, MAX_TOKENS, ChatPersona

REPO = Path(__file__).resolve().parents[2]

BASE = """\
name: t
tiers: [{name: a}]
personas:
  - kind: chat
    name: c
    tier: a
    arrival: {rate: 1}
"""


def _bomb(levels: int = 9) -> str:
    """The "billion laughs": 9 aliases of 9 aliases … expand to 9**9 (387 million) strings."""
    text = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels):
        text += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return text + BASE.replace("tiers: [{name: a}]", f"tiers: *l{levels - 1}")


def _problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "s.yaml")
    return [p.render("s.yaml") for p in info.value.problems]


# A child with a small address space: on a parser that expands aliases it dies or hangs, here it answers.
_CHILD = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
from rushhour.scenarios import ScenarioError, parse_scenario
text = sys.stdin.read()
t0 = time.monotonic()
try:
    parse_scenario(text, "s.yaml")
except ScenarioError as exc:
    print(round(time.monotonic() - t0, 3), exc.problems[0].render("s.yaml"))
"""


@pytest.mark.parametrize(
    "text, words",
    [
        (_bomb(), "an alias bomb"),
        ("name: " + "[" * 50_000 + "]" * 50_000 + "\n", f"nested deeper than {MAX_DEPTH}"),
        ("x:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)), f"nested deeper than {MAX_DEPTH}"),
        ("a: &a [*a]\n" + BASE, "refers to the collection that contains it"),
    ],
    ids=["billion-laughs", "deep-flow", "deep-block", "self-alias"],
)
def test_hostile_yaml_is_refused_fast_in_little_memory(text: str, words: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-c", _CHILD], input=text, capture_output=True, text=True,
                           timeout=120, env=env)
    elapsed = time.monotonic() - started
    assert child.returncode == 0, child.stderr[-2000:]
    assert words in child.stdout, child.stdout
    assert len(child.stdout.strip().splitlines()) == 1
    parse_s = float(child.stdout.split()[0])
    assert parse_s < 5.0, child.stdout  # generous: the check is linear in the file, ~10 ms idle
    assert elapsed < 60.0


def test_a_legit_alias_still_works() -> None:
    ok = "tiers: [{name: a, slo: &slo {max_drop_rate: 0.1}}, {name: b, slo: *slo}]"
    scenario = parse_scenario(BASE.replace("tiers: [{name: a}]", ok))
    assert scenario.tiers[1].slo.max_drop_rate == 0.1


def test_node_limit_is_far_above_the_library() -> None:
    assert MAX_NODES >= 50_000
    for path in (REPO / "scenarios" / "library").glob("*.yaml"):
        load_scenario(path)


@pytest.mark.parametrize(
    "persona, field, words",
    [
        ("arrival: {rate: 1e9}", "arrival.rate", f"less than or equal to {MAX_RATE:.0f}"),
        ("arrival: {rate: .inf}", "arrival.rate", "finite number"),
        ("arrival: {rate: .nan}", "arrival.rate", "finite number"),
        ("arrival: {rate: 1}\n    prompt_tokens: 1e12", "prompt_tokens", f"at most {MAX_TOKENS:,} tokens"),
        ("arrival: {rate: 1}\n    output_tokens: {dist: lognormal, mu: 40, sigma: 1}", "output_tokens",
         f"at most {MAX_TOKENS:,} tokens"),
        ("arrival: {rate: 1}\n    output_tokens: {dist: uniform, low: 1, high: .inf}", "output_tokens", "at most"),
        ("arrival: {rate: 1}\n    system_prompt_tokens: 1e12", "system_prompt_tokens", "less than or equal"),
    ],
)
def test_rates_and_token_counts_have_limits(persona: str, field: str, words: str) -> None:
    text = BASE.replace("arrival: {rate: 1}", persona)
    problems = _problems(text)
    assert any(field in p and words in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_tenants_agents_and_durations_have_limits() -> None:
    problems = _problems(BASE.replace("{name: a}", "{name: a, tenants: 1e9}"))
    assert any("tiers.0.tenants" in p and f"{MAX_TENANTS:,}" in p for p in problems), problems
    swarm = BASE + "  - {kind: agent_swarm, name: s, tier: a, agents: 1000000000}\n"
    assert any("agents" in p and f"{MAX_AGENTS}" in p for p in _problems(swarm))
    fanout = BASE + "  - {kind: agent_swarm, name: s, tier: a, fanout: 1e6}\n"
    assert any("fanout" in p and "1,000 parallel calls" in p for p in _problems(fanout))
    scaled = BASE + "  - {kind: agent_swarm, name: s, tier: a, agents: 5000}\nphases: [{name: p, duration: 5, " \
                    "rate_scale: 4}]\n"
    assert any("agents is over the limit" in p for p in _problems(scaled))
    burst = BASE.replace("rate: 1", "rate: 5000") + "phases: [{name: p, duration: 5, rate_scale: 3}]\n"
    assert any("over the limit of 10,000 arrivals/s" in p for p in _problems(burst))
    for duration in ("1e12", ".inf", "99999h"):
        problems = _problems(BASE + f"phases: [{{name: p, duration: {duration}}}]\n")
        assert any("phases.0.duration" in p and "at most 604800 s" in p for p in problems), problems
    assert any("drain_s" in p for p in _problems(BASE + "drain_s: .inf\n"))


def test_open_token_tails_are_clipped_at_the_limit() -> None:
    scenario = parse_scenario(BASE.replace("arrival: {rate: 1}",
                                           "arrival: {rate: 1}\n    prompt_tokens: {dist: lognormal, median: 500, "
                                           "sigma: 9}"))
    persona = scenario.personas[0]
    assert isinstance(persona, ChatPersona)
    assert persona.prompt_tokens.max == MAX_TOKENS


def test_yaml_1_2_floats() -> None:
    """`1e3` is a number as in YAML 1.2 (YAML 1.1 reads it as a string)."""
    scenario = parse_scenario(BASE.replace("rate: 1", "rate: 1e3"))
    persona = scenario.personas[0]
    assert isinstance(persona, ChatPersona)
    assert persona.arrival.rate == 1000.0


@pytest.mark.parametrize("kind", ["binary", "directory", "latin1", "huge"])
def test_unreadable_scenario_files_are_one_line_errors(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "s.yaml"
    if kind == "binary":
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    elif kind == "directory":
        path.mkdir()
    elif kind == "latin1":
        path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    else:
        path.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert len(info.value.problems) == 1


_SLO_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from rushhour.audit.errors import AuditError
from rushhour.audit.scenario import load_slo_file
try:
    load_slo_file(sys.argv[1])
except AuditError as exc:
    print(exc)
"""


def test_an_slo_file_bomb_is_refused_too(tmp_path: Path) -> None:
    """`rushhour gate --slo FILE` reads YAML under the same limits as a scenario."""
    slo = tmp_path / "slo.yaml"
    slo.write_text(_bomb().replace("name: t", "tiers: {gold: {max_drop_rate: 0.1}}\nname: t"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run([sys.executable, "-c", _SLO_CHILD, str(slo)], capture_output=True, text=True,
                           timeout=120, env=env)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "an alias bomb" in child.stdout and len(child.stdout.strip().splitlines()) == 1


def test_a_swarm_bigger_than_the_open_file_limit_is_refused(tmp_path: Path) -> None:
    """Within every field's limit, but 10 000 agents × 1 000 parallel calls need more sockets than the machine."""
    import resource

    from rushhour.loadgen.prepare import RunOptions, peak_connections
    from rushhour.loadgen.runner import run_scenario

    path = tmp_path / "s.yaml"
    path.write_text(BASE + "  - {kind: agent_swarm, name: s, tier: a, agents: 10000, fanout: 1000}\n")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard > 10_000_000:
        pytest.skip("no open-file limit to check against")
    assert peak_connections(load_scenario(path), 1) > hard
    with pytest.raises(ScenarioError) as info:
        run_scenario(str(path), RunOptions(out_dir=tmp_path / "runs", dry_run=True))
    assert "ulimit -n" in str(info.value) and "--processes" in str(info.value)
    assert peak_connections(load_scenario("demo"), 1) < 1024  # the library fits a default limit
