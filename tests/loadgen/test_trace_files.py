"""Garbage, binary and out-of-place trace files are one-line scenario errors before anything runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import rushhour

from rushhour.loadgen.runner import RunOptions, run_scenario
from rushhour.loadgen.traces import localise_traces, locate_trace, read_trace
from rushhour.scenarios import ScenarioError, load_scenario
from rushhour.scenarios.distributions import BUNDLED_TRACES
from rushhour.scenarios.model import TraceReplayPersona

SCENARIO = """
name: replay
target: {{url: "http://127.0.0.1:9", profile: vllm, metrics: null}}
tiers: [{{name: t}}]
calibration: {{probes: 0}}
personas: [{{kind: trace_replay, name: r, tier: t, trace: "{trace}"}}]
phases: [{{name: p, duration: 5s}}]
"""

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.1,396,109\n"


def _scenario(folder: Path, trace: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "s.yaml"
    path.write_text(SCENARIO.format(trace=trace))
    return path


def _check(path: Path, allowed: list[Path] | None = None) -> object:
    return localise_traces(load_scenario(path), path.parent, allowed or [], str(path))


@pytest.mark.parametrize(
    "content, words",
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)) * 4, "binary data"),
        (b"TIMESTAMP,ContextTokens,GeneratedTokens\ncaf\xe9,1,2\n", "not UTF-8"),
        (b"hello world\nthis is not a trace\n", "cannot tell the trace format"),
        (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12,x\n", ":2: not an Azure trace row"),
        (b"TIMESTAMP,Foo\n1,2\n", "expected columns"),
        (b'{"timestamp": 0, "input_length": 5, "output_length": 3}\n{not json\n', ":2: not a Mooncake trace line"),
        (b'{"timestamp": 0, "input_length": -5, "output_length": 3}\n', ":1: not a Mooncake trace line"),
        (b"TIMESTAMP,ContextTokens,GeneratedTokens\n", "no rows"),
    ],
    ids=["binary", "latin1", "prose", "azure-bad-row", "azure-columns", "mooncake-json", "negative", "empty"],
)
def test_garbage_traces_are_one_line_errors(tmp_path: Path, content: bytes, words: str) -> None:
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "t.trace").write_bytes(content)
    path = _scenario(tmp_path / "sc", "t.trace")
    with pytest.raises(ScenarioError) as info:
        _check(path)
    assert len(info.value.problems) == 1
    problem = info.value.problems[0].render(str(path))
    assert words in problem and "\n" not in problem, problem
    assert "personas.0.trace" in problem


def test_a_trace_next_to_the_scenario_is_read_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "t.csv").write_text(AZURE)
    path = _scenario(tmp_path / "sc", "t.csv")
    monkeypatch.chdir(tmp_path)  # the working directory is not the scenario's folder
    scenario = _check(path)
    persona = scenario.personas[0]  # type: ignore[attr-defined]
    assert isinstance(persona, TraceReplayPersona)
    assert persona.trace == str((tmp_path / "sc" / "t.csv").resolve())  # the load processes read this file
    assert len(read_trace(Path(persona.trace))) == 2


def test_shipped_traces_by_name_are_allowed(tmp_path: Path) -> None:
    name = next(p.name for p in BUNDLED_TRACES.glob("*.csv"))
    assert locate_trace(name, tmp_path) == (BUNDLED_TRACES / name).resolve()


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink"])
def test_a_trace_outside_the_scenario_folder_is_refused(tmp_path: Path, where: str) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "t.csv").write_text(AZURE)
    (tmp_path / "sc").mkdir()
    trace = {"absolute": str(outside / "t.csv"), "dotdot": "../elsewhere/t.csv", "symlink": "link.csv"}[where]
    if where == "symlink":
        os.symlink(outside / "t.csv", tmp_path / "sc" / "link.csv")
    path = _scenario(tmp_path / "sc", trace)
    with pytest.raises(ScenarioError) as info:
        _check(path)
    assert "outside the scenario's folder and the shipped traces" in str(info.value)
    assert f"--allow-path {outside.resolve()}" in str(info.value)
    _check(path, [outside])  # the explicit option lets it through


def test_a_secret_file_is_not_read_or_quoted(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "id").write_text("TIMESTAMP-LIKE-SECRET-CONTENT hunter2\n")
    path = _scenario(tmp_path / "sc", str(secret / "id"))
    with pytest.raises(ScenarioError) as info:
        _check(path)
    assert "hunter2" not in str(info.value)


def test_run_refuses_before_making_a_run_folder(tmp_path: Path) -> None:
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "t.csv").write_bytes(bytes(range(256)))
    path = _scenario(tmp_path / "sc", "t.csv")
    with pytest.raises(ScenarioError, match="binary data"):
        run_scenario(str(path), RunOptions(out_dir=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("verb", [["scenario", "check"], ["run", "--dry-run"]])
def test_the_cli_says_one_line_and_honours_allow_path(tmp_path: Path, verb: list[str]) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "t.csv").write_text(AZURE)
    path = _scenario(tmp_path / "sc", str(outside / "t.csv"))
    refused = rushhour(*verb, path, script=True, columns=300, timeout=120)
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert "--allow-path" in refused.stderr
    allowed = rushhour(*verb, path, "--allow-path", outside, script=True, columns=300, timeout=120)
    assert allowed.returncode == 0, allowed.stderr
