"""The CLI as the suite runs it: ``python -m rushhour.cli`` (or the console script) in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the installed console script beside this interpreter (what `pip install` puts on a user's PATH)
SCRIPT = Path(sys.executable).parent / "rushhour"
# set by a terminal or a CI runner, they would change what the child prints: the runner decides them
_WIDTH_AND_COLOUR = ("COLUMNS", "TERMINAL_WIDTH", "FORCE_COLOR")


def cli_command(*, script: bool = False) -> list[str]:
    """The argv that starts the CLI: ``python -m rushhour.cli``, or the installed console script."""
    if script:
        assert SCRIPT.exists(), f"no console script next to {sys.executable}: pip install -e . first"
        return [str(SCRIPT)]
    return [sys.executable, "-m", "rushhour.cli"]


def cli_env(env: Mapping[str, str | None] | None = None, *, columns: int | None = 200,
            inject: Path | None = None) -> dict[str, str]:
    """The child's environment: this checkout first on PYTHONPATH (after ``inject``), rich's width ``columns``
    (None: unset, so the CLI picks its own piped width), no forced colour, and ``env`` laid over it all last
    (a None value removes the variable)."""
    full = {k: v for k, v in os.environ.items() if k not in _WIDTH_AND_COLOUR}
    full["PYTHONPATH"] = os.pathsep.join([*([str(inject)] if inject else []), str(REPO)])
    if columns is not None:
        full["COLUMNS"] = str(columns)
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return full


def rushhour(*args: str | Path, cwd: Path | str | None = None, timeout: float = 600,
             env: Mapping[str, str | None] | None = None, columns: int | None = 200, inject: Path | None = None,
             script: bool = False) -> subprocess.CompletedProcess[str]:
    """``rushhour ARGS`` run to its end in a child process (cli_command, cli_env), output piped as in a CI log,
    never raising on its exit code. ``cwd`` defaults to the checkout; ``inject`` is a folder put first on the
    child's PYTHONPATH (a sitecustomize.py, say). For a child to signal or watch, Popen cli_command()."""
    return subprocess.run([*cli_command(script=script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=cli_env(env, columns=columns, inject=inject), cwd=str(cwd or REPO),
                          check=False)
