"""Shared bits of the end-to-end tests that run a scenario through `rushhour run` and read its run folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_scenario(text: str, tmp_path: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess[str],
                                                                                       Path]:
    """``rushhour run`` on the scenario ``text`` (``--out tmp_path/runs``, then ``args``); the result and the one
    run folder it wrote (the test fails, showing the output, when there is none)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    done = subprocess.run([sys.executable, "-m", "rushhour.cli", "run", str(scenario), "--out", str(tmp_path / "runs"),
                           *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    runs = list((tmp_path / "runs").glob("*/run.json"))
    assert runs, done.stdout[-2000:] + done.stderr[-2000:]
    return done, runs[0].parent


def last_scrape(run_dir: Path, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A family's samples at the run's last scrape that had it, by their labels (sorted pairs)."""
    last: dict[tuple[tuple[str, str], ...], float] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        found = {tuple(sorted((str(k), str(v)) for k, v in (s.get("labels") or {}).items())): float(s["value"])
                 for s in json.loads(line).get("samples", []) if s.get("name") == name}
        last = found or last
    return last
