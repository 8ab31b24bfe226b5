"""One scenario through ``rushhour run`` into a folder of its own: the process, the run folder, its summary."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from support.cli import rushhour
from support.scenario import write_scenario


def run(scenario: str | Path, folder: Path, *args: str | Path, timeout: float = 300, **options: Any) -> tuple[
        subprocess.CompletedProcess[str], Path, dict[str, Any] | None]:
    """``rushhour run`` on ``scenario`` (a path, or YAML text written to ``folder/s.yaml``) with ``--out
    folder/runs`` and ``args``; the finished process, its one run folder and the summary in it (None: no audit).

    The test fails, showing the output, unless the command left exactly one run folder. ``options`` go to the
    runner (``env``, ``columns``, ``cwd``...); the exit code is the caller's to check."""
    path = scenario if isinstance(scenario, Path) else write_scenario(folder, scenario)
    out = folder / "runs"
    done = rushhour("run", path, "--out", out, *args, timeout=timeout, **options)
    runs = sorted(p.parent for p in out.glob("*/run.json"))
    assert len(runs) == 1, f"{len(runs)} run folders in {out}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    summary = runs[0] / "summary.json"
    return done, runs[0], json.loads(summary.read_text()) if summary.exists() else None
