"""``rushhour calibrate`` against the session's real vLLM, then a held-out run predicted on its preset.

A quick calibration (few probes) must find what the server is (vLLM 0.32, 4 sequences at once, a KV cache of
512 blocks × 128 tokens) from its answers and metrics, measure its front end's CPU per request, keep its probe
runs audited and sealed, and write a preset the simulator takes. Then one held-out scenario runs for real and in
virtual time with the same seed: on the calibrated preset the simulator must come closer to the real TTFT than on
the built-in ``tiny`` preset (a relative check), within a factor of 2 of it once scaled by how much faster its
engine ran than the real one during the run (each one's own median inter-token time: the host's speed moves),
and agree on who was not served within 15 points.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from rushhour.testbed.presets import load_preset_file

from .helpers import ROOT, SCENARIOS, run_rushhour, tiers

MAX_MAPE = 0.9  # the held-out error calibrate may have here (see the test)


def _rushhour(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rushhour.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)


def _simulated(scenario: Path, out: Path, *preset: str) -> dict[str, Any]:
    proc = _rushhour("simulate", str(scenario), "--out", str(out), *preset)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    run = next(p for p in out.iterdir() if (p / "summary.json").exists())
    return {**json.loads((run / "summary.json").read_text()), "_run_dir": str(run)}


def _engine_itl_ms(run_dir: Path) -> float:
    """The engine's own median inter-token time over a run's served requests (its ``metrics``): how fast the
    engine ran then, whatever the model adds around it."""
    itl = [float(r["metrics_mean_itl_ms"]) for shard in (run_dir / "records").glob("*.jsonl")
           for r in map(json.loads, shard.read_text().splitlines())
           if r.get("kind") == "request" and r.get("status") == 200 and r.get("metrics_mean_itl_ms")]
    assert itl, f"no engine inter-token times in {run_dir}"
    return float(statistics.median(itl))


def _ttft_p50(summary: dict[str, Any], tier: str) -> float:
    return float(tiers(summary)[tier]["latency"]["ttft_ms"]["p50"])


def test_calibrate_then_predict_a_held_out_run(vllm_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    preset_file = tmp_path / "calibrated.yaml"
    # --quick holds out few requests of each kind on a host whose engine speed moves 2x within minutes
    # (benchmarks/engine_speed.py: one lone request 2.4-5.9 ms a token over 12 quiet minutes): its 9 held-out
    # prefill requests once came out 64.5 % off (CI39, repeat noise 13.4 %, decode 36.8 %), so 60 % failed a sound
    # fit. 90 % still refuses a misfit (a coefficient off by 2x is 100 %); the prediction checks below are the test.
    cal = _rushhour("calibrate", "--target", vllm_server.url, "--quick", "--decode-tokens", "16", "--gap", "0.3",
                    "--max-mape", str(MAX_MAPE), "--runs", str(tmp_path / "cal"), "--out", str(preset_file))
    assert cal.returncode == 0, f"{cal.stdout[-2000:]}\n{cal.stderr[-3000:]}"
    preset = load_preset_file(preset_file)
    cal_info = preset.calibration
    assert cal_info is not None and cal_info.engine == "vllm 0.32.0" and cal_info.server == vllm_server.url
    assert preset.max_num_seqs == 4, cal_info.sources  # found by the saturating burst, not told
    assert preset.kv_capacity_tokens == 512 * 128 and preset.block_tokens == 128  # vllm:cache_config_info
    assert preset.base_s > 0 and cal_info.heldout >= 3 and cal_info.mape <= MAX_MAPE
    folder = Path(cal_info.folder)
    page = (folder / "calibration.md").read_text()
    assert "Error on held-out probes" in page and str(preset_file) in page
    runs = sorted((folder / "runs").iterdir())
    assert len(runs) == 2 and all((r / "integrity.json").exists() for r in runs)
    assert _rushhour("verify", str(runs[0])).returncode == 0  # the evidence is sealed as any run's
    # the front end: its CPU per request read from the API server's own counter, and whether it takes the engine's
    # core measured (the fixture pins vLLM to one core), said on the page either way
    front = json.loads((folder / "calibration.json").read_text())["front_end"]
    assert 0.0002 <= front["cpu_s"] <= 0.05 and front["shares_core"] is not None, front
    assert preset.front_end_cpu_s == (front["cpu_s"] if front["shares_core"] else 0.0)
    assert "front end's CPU per request" in page and cal_info.front_end_shares_core == front["shares_core"]
    assert "the decode ladder ran once" in page and cal_info.speed_drift is None  # --quick: the host's drift unmeasured

    scenario = SCENARIOS / "vllm-calibrate-heldout.yaml"
    real = run_rushhour(scenario, vllm_server.url, tmp_path / "real")
    calibrated = _simulated(scenario, tmp_path / "sim-cal", "--preset", str(preset_file))
    builtin = _simulated(scenario, tmp_path / "sim-tiny")
    assert calibrated["run"]["calibration"]["sha256"] and builtin["run"]["calibration"] is None
    figures = {name: {t: (_ttft_p50(s, t), tiers(s)[t]["drop_rate"]["value"])
                      for t in ("interactive", "batch")}
               for name, s in (("real", real), ("calibrated", calibrated), ("builtin", builtin))}
    # how much faster the simulated engine ran than the real one did during the run (each one's own median
    # inter-token time): this shared 2-core host moved the engine's step time by 2× and more within minutes
    # (docs/capacity.md "Calibrated against a real engine"), an error no model of the engine removes
    drift = _engine_itl_ms(Path(str(calibrated["_run_dir"]))) / _engine_itl_ms(Path(str(real["_run_dir"])))
    print(json.dumps({**figures, "engine_itl_sim_over_real": drift}, indent=1))
    for tier in ("interactive", "batch"):
        want, want_drop = figures["real"][tier]
        got, got_drop = figures["calibrated"][tier]
        assert abs(got - want) < abs(figures["builtin"][tier][0] - want), figures  # calibration helped
        # and within a factor of 2 of the real p50 once the engine's own speed in each is allowed for: what is left
        # is the model around the engine (queueing, prefill, the front end)
        assert want / 2 <= got / drift <= 2 * want, (figures, drift)
        assert abs(float(got_drop) - float(want_drop)) <= 0.15, figures  # not served within 15 points
