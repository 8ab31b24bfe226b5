"""The calibration probes' plan, pure: what ``loadgen.engine.calibrate`` sends and what the runner reads back.

The runner (parent process, no gevent) counts the probes, prints their deadlines and reads the
child's progress file with these; the child sends them. See ``loadgen/engine/calibrate.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rushhour.scenarios.model import Scenario

CALIBRATION_PERSONA = "calibration"  # the audit's name for these probes (audit/fold.py)
# a probe measures TTFT: each further token is decode time spent waiting (16 tokens: 1.0 s a probe on L4, 2: 0.2 s)
PROBE_OUTPUT_TOKENS = 2
PROBE_GAP_S = 0.05  # between probes: the previous one's connection teardown must not overlap
PROBE_CONNECT_S = 5.0  # a probe's own deadlines (capped by the scenario's): an idle target answers fast
PROBE_TTFT_S = 10.0
PROBE_TOTAL_S = 30.0
PROGRESS_FILE = "calibration.json"


@dataclass
class ProbeResult:
    """How the probes went (also the content of ``calibration.json``)."""

    probes: int
    sent: int = 0
    served: int = 0
    gave_up: str | None = None  # why the probes stopped early (a timeout or a transport error)
    interrupted: bool = False
    done: bool = False


def probe_plan(scenario: Scenario) -> list[int]:
    """The prompt size of every probe, in sending order (empty with ``probes: 0``)."""
    cal = scenario.calibration
    return [size for size in cal.prompt_tokens for _ in range(cal.probes)]


def probe_scenario(scenario: Scenario) -> Scenario:
    """The scenario with the probes' own short deadlines in place of ``resilience.timeouts``."""
    t = scenario.resilience.timeouts
    short = t.model_copy(
        update={
            "connect_s": min(t.connect_s, PROBE_CONNECT_S),
            "ttft_s": min(t.ttft_s, PROBE_TTFT_S),
            "total_s": min(t.total_s, PROBE_TOTAL_S),
        }
    )
    resilience = scenario.resilience.model_copy(update={"timeouts": short})
    return scenario.model_copy(update={"resilience": resilience})


def write_progress(run_dir: Path, result: ProbeResult) -> None:
    """Rewrite ``calibration.json`` atomically (the runner reads it while the child runs)."""
    path = run_dir / PROGRESS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(result)))
    os.replace(tmp, path)


def read_progress(run_dir: Path) -> dict[str, Any] | None:
    """``calibration.json`` as the child last wrote it (None before the first write)."""
    try:
        data: dict[str, Any] = json.loads((Path(run_dir) / PROGRESS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data


