"""How a pip user gets the simulator's compiled build: never `make`, and a missing compiler is one line."""

from __future__ import annotations

import pytest

from rushhour.sim import compiled


def test_status_names_a_command_a_pip_user_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(compiled.ENV, raising=False)
    monkeypatch.setattr(compiled, "manifest", lambda: None)
    line = compiled.status()
    assert line == "interpreted (no compiled build of these sources: `python -m rushhour.sim.compiled build`)"
    assert "make" not in line


def test_build_without_mypyc_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    real = compiled.importlib.util.find_spec
    monkeypatch.setattr(compiled.importlib.util, "find_spec", lambda name, *a: None if name == "mypyc" else real(name))
    assert compiled.main(["build"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "`pip install mypy==2.4.1`, then `python -m rushhour.sim.compiled build` again" in err[0]
    assert compiled.main(["build", "--best-effort"]) == 0  # `make compile` still goes on without it


def test_the_pin_comes_from_the_package_metadata() -> None:
    assert compiled.compiler_requirement() == "mypy==2.4.1"
