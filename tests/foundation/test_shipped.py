"""What the docs send a user to is printed by a command: a built-in scenario, the example locustfile, the schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support import rushhour

from rushhour import shipped
from rushhour.audit.schema import SCHEMA_PATH
from rushhour.scenarios import parse_scenario

REPO = Path(__file__).resolve().parents[2]


def test_scenario_show_prints_every_builtin_as_shipped(tmp_path: Path) -> None:
    for name, path in shipped.builtin_scenarios().items():
        text = shipped.scenario_text(name)
        assert text == path.read_text()
        assert parse_scenario(text, f"{name}.yaml").name  # a template that loads as it is
    done = rushhour("scenario", "show", "demo", cwd=tmp_path, script=True)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["name"] == "demo"


@pytest.mark.parametrize("name", ["nope", "../demo", "demo.yaml", "/etc/passwd", "", "[bold]x[/]", "[/]"])
def test_scenario_show_refuses_other_names_in_one_line(tmp_path: Path, name: str) -> None:
    done = rushhour("scenario", "show", name, cwd=tmp_path, script=True)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "built-in scenarios: capacity-plan, ci-smoke" in lines[0], done.stderr
    assert repr(name) in lines[0]  # what was typed, as typed (no markup read into it)


def test_examples_are_the_repository_files(tmp_path: Path) -> None:
    done = rushhour("example", "locustfile", cwd=tmp_path, script=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO / "examples" / "locustfile.py").read_text()
    docker = rushhour("example", "dockerfile", cwd=tmp_path, script=True)
    assert docker.returncode == 0 and docker.stdout == (REPO / "examples" / "Dockerfile").read_text()
    bad = rushhour("example", "../locustfile", cwd=tmp_path, script=True)
    assert bad.returncode == 2 and "examples: locustfile, dockerfile" in bad.stderr and "Traceback" not in bad.stderr


def test_the_wheel_carries_the_example_where_the_command_reads_it() -> None:
    # pyproject's force-include puts examples/locustfile.py at rushhour/examples/ in the wheel: one copy of the text
    text = (REPO / "pyproject.toml").read_text()
    for name, file in shipped.EXAMPLES.items():
        assert f'"examples/{file}" = "rushhour/examples/{file}"' in text, name
    assert shipped.PACKAGED_EXAMPLES == REPO / "rushhour" / "examples"


def test_schema_summary_prints_the_committed_schema(tmp_path: Path) -> None:
    done = rushhour("schema", "summary", cwd=tmp_path, script=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == SCHEMA_PATH.read_text()
