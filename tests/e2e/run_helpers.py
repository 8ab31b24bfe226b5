"""Shared bits of the end-to-end tests that read a run folder (tests/support runs the scenario)."""

from __future__ import annotations

import json
from pathlib import Path


def last_scrape(run_dir: Path, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A family's samples at the run's last scrape that had it, by their labels (sorted pairs)."""
    last: dict[tuple[tuple[str, str], ...], float] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        found = {tuple(sorted((str(k), str(v)) for k, v in (s.get("labels") or {}).items())): float(s["value"])
                 for s in json.loads(line).get("samples", []) if s.get("name") == name}
        last = found or last
    return last
