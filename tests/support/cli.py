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


def rushhour(*args: str | Path, cwd: Path | str | None = None, timeout: float = 300,
             env: Mapping[str, str] | None = None, columns: int | None = 200, inject: Path | None = None,
             script: bool = False) -> subprocess.CompletedProcess[str]:
    """``rushhour ARGS`` in a child process, output piped as in a CI log (never a terminal), never raising on exit.

    The child runs this checkout (its root first on PYTHONPATH, after ``inject``: a folder of, say, a
    sitecustomize.py). ``columns`` is the width rich wraps at (None: unset, a pipe's default of 80); ``env`` is
    laid over the parent's environment last; ``cwd`` defaults to the checkout; ``script`` runs the installed
    console script instead of ``python -m rushhour.cli``."""
    full = {k: v for k, v in os.environ.items() if k not in _WIDTH_AND_COLOUR}
    full["PYTHONPATH"] = os.pathsep.join([*([str(inject)] if inject else []), str(REPO)])
    if columns is not None:
        full["COLUMNS"] = str(columns)
    full |= dict(env or {})
    if script:
        assert SCRIPT.exists(), f"no console script next to {sys.executable}: pip install -e . first"
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "rushhour.cli"]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=full,
                          cwd=str(cwd or REPO), check=False)
