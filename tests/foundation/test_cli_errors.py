"""No traceback reaches the user: one line plus a hint, and ``--debug`` shows the traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import rushhour

# Loaded by the child's interpreter at start-up: an internal error where no verb expects one.
_SITECUSTOMIZE = """
from rushhour import scenarios

def _boom(*args, **kwargs):
    raise RuntimeError("internal failure for the test\\nsecond line of it")

scenarios.load_scenario = _boom
"""


@pytest.fixture
def inject(tmp_path: Path) -> Path:
    folder = tmp_path / "inject"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return folder


def test_an_unexpected_error_is_one_line_and_a_hint(inject: Path) -> None:
    result = rushhour("scenario", "check", "demo", inject=inject, script=True)
    assert result.returncode == 3, result
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert lines == ["error: RuntimeError: internal failure for the test",
                     "run again with --debug for the traceback"], result.stderr


@pytest.mark.parametrize("where", ["front", "end"])
def test_debug_shows_the_traceback(inject: Path, where: str) -> None:
    args = ["--debug", "scenario", "check", "demo"] if where == "front" else ["scenario", "check", "demo", "--debug"]
    result = rushhour(*args, inject=inject, script=True)
    assert result.returncode == 3
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: internal failure for the test" in result.stderr


def test_help_lists_debug() -> None:
    result = rushhour("--help", script=True)
    assert result.returncode == 0
    assert "--debug" in result.stdout


@pytest.mark.parametrize("verb", [["scenario", "check"], ["run", "--dry-run"]])
def test_a_binary_scenario_is_a_one_line_problem(tmp_path: Path, verb: list[str]) -> None:
    binary = tmp_path / "s.yaml"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    result = rushhour(*verb, str(binary), script=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "not UTF-8 text" in result.stderr


def test_a_directory_as_scenario_is_a_one_line_problem(tmp_path: Path) -> None:
    result = rushhour("scenario", "check", str(tmp_path), script=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "is a directory" in result.stderr


@pytest.mark.parametrize("verb", [["run"], ["scenario", "show"], ["simulate"], ["sweep"]])
def test_what_the_user_typed_is_never_read_as_markup(verb: list[str]) -> None:
    """A name with Rich markup in it ('[/]') is quoted back as text: exit 2, never a MarkupError (exit 3)."""
    result = rushhour(*verb, "[/]", script=True)
    assert result.returncode == 2, result.stderr
    assert "'[/]'" in result.stderr and "MarkupError" not in result.stderr
