"""The priority control end to end on the testbed: its ``vllm`` profile honours priority, ``fifo`` does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]

SCENARIO = """
name: e2e-control-{profile}
seed: 5
target:
  url: testbed
  profile: {profile}
  model: testbed-model
  testbed: {{preset: tiny, replicas: 1, speed: 0.25}}
  metrics: null
calibration: {{probes: 0}}
control: {{share: 0.5}}
tiers:
  - {{name: interactive, priority: 10}}
  - {{name: batch, priority: 0}}
personas:
  - {{kind: chat, name: chat, tier: interactive, turns: 1, arrival: {{process: poisson, rate: 8}},
     prompt_tokens: 64, output_tokens: 24}}
  - {{kind: chat, name: bulk, tier: batch, turns: 1, arrival: {{process: poisson, rate: 8}},
     prompt_tokens: 64, output_tokens: 24}}
phases:
  - {{name: peak, duration: 8s}}
drain_s: 8
"""


def _run(tmp_path: Path, profile: str) -> tuple[dict[str, dict[str, object]], Path]:
    path = tmp_path / f"{profile}.yaml"
    path.write_text(SCENARIO.format(profile=profile))
    out = tmp_path / profile
    proc = subprocess.run([sys.executable, "-m", "rushhour.cli", "run", str(path), "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=240, check=False)
    runs = [p for p in out.iterdir() if (p / "summary.json").exists()] if out.exists() else []
    assert runs, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert "priority vs equal-priority control: interactive" in proc.stdout, proc.stdout[-2000:]
    return {t["name"]: t for t in summary["tiers"]}, runs[0]


def test_vllm_profile_shows_the_effect_and_fifo_does_not(tmp_path: Path) -> None:
    tiers, run_dir = _run(tmp_path, "vllm")
    effect = tiers["interactive"]["priority_effect"]
    assert effect is not None, tiers["interactive"]
    print(effect["message"], tiers["batch"]["priority_effect"]["message"])  # type: ignore[index]
    assert effect["ttft"]["significant"] and effect["ttft"]["change"] < 0, effect  # type: ignore[index]
    # the twins are in the attempts table, marked, and in no tier's counts
    table = pq.read_table(run_dir / "attempts.parquet").to_pandas()
    twins = table[table["control"]]
    assert len(twins) and twins["probe"].all()
    own = table[~table["probe"]]
    assert tiers["interactive"]["attempts"] == int((own["tier"] == "interactive").sum())
    assert "Did priority do anything?" in (run_dir / "report.html").read_text()

    fifo, _ = _run(tmp_path, "fifo")
    null = fifo["interactive"]["priority_effect"]
    print(null["message"])  # type: ignore[index]
    assert null["ttft"]["n"] >= 10 and null["ttft"]["p_value"] > 0.01, null  # type: ignore[index]
