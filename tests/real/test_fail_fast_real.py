"""A wrong model name against a real vLLM 0.32 stops `rushhour run` within seconds, in vLLM's own words.

Before: the calibration probes served 0, then the run sent every request of its length, all 404, and exited 0.
Caught by the calibration probes, and (with none) by the load's first attempts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).parent / "scenarios" / "vllm-wrong-model.yaml"
STOP_WITHIN_S = 15.0


@pytest.mark.parametrize("probes", [3, 0], ids=["calibration", "load"])
def test_a_wrong_model_stops_a_real_vllm_run_within_seconds(fcfs_vllm, tmp_path: Path,
                                                            probes: int) -> None:
    scenario = tmp_path / "wrong.yaml"
    scenario.write_text(SCENARIO.read_text().replace("probes: 3,", f"probes: {probes},"))
    out = tmp_path / "runs"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rushhour.cli", "run", str(scenario), "--target", fcfs_vllm.url,
                           "--out", str(out), "--no-report"], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "COLUMNS": "250"})
    took = time.monotonic() - started
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stdout + done.stderr
    assert took < STOP_WITHIN_S, f"stopped after {took:.1f} s\n{done.stderr}"
    # vLLM 0.32's own text (vllm/entrypoints/serve/engine/serving.py _check_model), and /v1/models' list
    assert "The model `llama-3.1-8b` does not exist. Valid aliases: tiny." in said, done.stderr
    assert "model 'llama-3.1-8b' does not exist: served models are tiny;" in said, done.stderr
    run_dir = next(out.glob("*/run.json")).parent
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["stop_reason"] == "aborted_doomed" and manifest["abort"]["status"] == 404
    assert manifest["abort"]["served_models"] == ["tiny"]
    print(f"\nwrong model against vLLM ({'calibration' if probes else 'load'}): stopped after {took:.1f} s, exit 2")
