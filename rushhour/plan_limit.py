"""``rushhour plan --find-limit``: the find-limit controller on simulated clusters of each size asked.

``plan`` answers "how many replicas does this load need"; with ``--find-limit`` it answers "how much load per
tier does a cluster of N replicas carry": one simulated find-limit run per replica count (sim/, virtual time;
the same pure controller as ``run --find-limit``, audit/limit.py), its ramp scaled with the cluster so each size
is searched over the same load per replica.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rushhour.audit.limit import LimitController
from rushhour.scenarios.model import FindLimit, Scenario
from rushhour.sim.run import SimOptions, simulate_scenario

MAX_SCALE = 1000.0  # the scale file's and the scenario block's bound


def scaled_search(settings: FindLimit, factor: float) -> FindLimit:
    """The search's range × ``factor`` (replicas over the scenario's own), within the scale's bounds."""
    start = min(settings.start * factor, MAX_SCALE)
    return settings.model_copy(update={"start": start, "max_scale": min(max(settings.max_scale * factor, start),
                                                                       MAX_SCALE)})


def limit_cell(base: Scenario, source: str, folder: Path, replicas: int) -> dict[str, Any]:
    """One simulated find-limit run on ``replicas`` replicas: its folder and its answer (run.json's)."""
    own = base.target.testbed.replicas
    settings = scaled_search(base.find_limit or FindLimit(), replicas / own)
    cell = base.model_copy(update={"find_limit": settings})
    result = simulate_scenario(cell, source, SimOptions(out_dir=folder, replicas=replicas, find_limit=True,
                                                        limit=LimitController))
    manifest = json.loads((result.run_dir / "run.json").read_text())
    return {"replicas": replicas, "run_dir": str(result.run_dir), "found": manifest.get("find_limit") or {},
            "simulated_s": result.stats.get("simulated_s"), "wall_s": result.stats.get("wall_s")}
