"""A calibrated preset's file (testbed/presets.py): it loads into the same ``Preset`` a built-in name gives, a hostile
file is one line, and a simulated run on it says which preset and calibration it rests on; its two extra terms
(a prefill step's cost, the server's front end) change the simulated times as the model says."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rushhour.testbed.presets import PRESETS, Calibration, dump_preset, get_preset, load_preset_file

from .sim_helpers import SATURATED, cli, only_run

CAL = Calibration(server="http://127.0.0.1:8000", engine="vllm 0.32.0", date="2026-12-06T23:00:00+00:00",
                  folder="runs/calibrate-x", requests=60, heldout=20, mape=0.12, pearson_r=0.95,
                  intervals={"base_s": [0.001, 0.003]}, sources={"max_num_seqs": "flag --max-num-seqs"},
                  speed_drift=-0.197)


def _write(path: Path, **changes: object) -> Path:
    preset = dataclasses.replace(PRESETS["tiny"], name="cal", calibration=CAL, **changes)  # type: ignore[arg-type]
    path.write_text(dump_preset(preset, "test"))
    return path


def test_a_preset_file_round_trips_into_the_same_type(tmp_path: Path) -> None:
    path = _write(tmp_path / "cal.yaml", front_end_s=0.05, prefill_step_s=0.01)
    loaded = get_preset(str(path))
    assert loaded == load_preset_file(path) and loaded.calibration == CAL and loaded.front_end_s == 0.05


@pytest.mark.parametrize(("text", "says"), [
    ("name: x\nbogus: 1\n", "bogus: unknown key"),
    ("[1, 2", "not YAML"),
    ("x" * 70_000, "larger than 64 KiB"),
])
def test_a_hostile_preset_file_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=says) as err:
        load_preset_file(path)
    assert "\n" not in str(err.value)


def test_a_negative_coefficient_or_a_missing_file_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "neg.yaml")
    path.write_text(path.read_text().replace("per_seq_s: 0.0002", "per_seq_s: -0.5"))
    with pytest.raises(ValueError, match="per_seq_s: must be a finite number"):
        load_preset_file(path)
    with pytest.raises(ValueError, match="cannot read it"):
        get_preset(str(tmp_path / "missing.yaml"))


# one tier at light load on one tiny replica: ~60 requests served, nearly every one alone, so its TTFT is the
# front end plus a prefill
LIGHT = """
name: sim-light
seed: 5
target: {url: testbed, profile: vllm, testbed: {preset: tiny, replicas: 1}}
tiers: [{name: interactive, priority: 0}]
personas:
  - {kind: chat, name: chat, tier: interactive, arrival: {process: poisson, rate: 2}, turns: 1,
     system_prompt_tokens: 0, prompt_tokens: {dist: constant, value: 64}, output_tokens: {dist: constant, value: 8}}
phases: [{name: steady, duration: 30s}]
calibration: {probes: 0}
drain_s: 3
"""


def _simulate(tmp_path: Path, name: str, *extra: str, scenario_text: str = SATURATED,
              duration: str = "6s") -> dict[str, object]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(scenario_text)
    proc = cli("simulate", str(scenario), "--out", str(tmp_path / name), "--duration", duration, *extra)
    assert proc.returncode == 0, proc.stderr
    run = only_run(tmp_path / name)
    return {"summary": json.loads((run / "summary.json").read_text()), "report": (run / "report.md").read_text()}


def test_a_simulated_run_says_which_preset_it_rests_on(tmp_path: Path) -> None:
    plain = _simulate(tmp_path, "plain")
    assert plain["summary"]["run"]["calibration"] is None  # type: ignore[index]
    assert "not calibrated against a real engine" in str(plain["report"])
    path = _write(tmp_path / "cal.yaml", front_end_s=0.2)
    slow = _simulate(tmp_path, "cal", "--preset", str(path))
    cal = slow["summary"]["run"]["calibration"]  # type: ignore[index]
    assert cal["engine"] == "vllm 0.32.0" and cal["mape"] == 0.12 and len(cal["sha256"]) == 64
    assert "fitted to vllm 0.32.0 at http://127.0.0.1:8000" in str(slow["report"])
    assert cal["speed_drift"] == -0.197 and "the engine ran 20% faster at the calibration's end" in str(slow["report"])

    def p50(result: dict[str, object]) -> float:
        tier = next(t for t in result["summary"]["tiers"] if t["name"] == "batch")  # type: ignore[index]
        return float(tier["latency"]["ttft_ms"]["p50"])

    # the front end delays every arrival at the engine by 0.2 s (at speed 0.1 the scenario's testbed runs
    # its steps 10× slower, not its front end): the served batch requests' TTFT grows by about that
    assert 150 <= p50(slow) - p50(plain) <= 600, (p50(plain), p50(slow))


def test_a_bad_preset_flag_is_one_line(tmp_path: Path) -> None:
    proc = cli("simulate", "ci-smoke", "--out", str(tmp_path), "--preset", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2 and "nope.yaml" in proc.stderr and "Traceback" not in proc.stderr


def test_a_front_end_on_the_engines_core_slows_a_busy_engine(tmp_path: Path) -> None:
    """``front_end_cpu_s``: each arrival at a busy engine lengthens its next step, so a saturated replica serves
    less (7.5 arrivals a second × 4 ms = 3 % of each simulated second, × 10 at speed 0.1)."""
    plain = _simulate(tmp_path, "plain", "--preset", str(_write(tmp_path / "plain.yaml")))
    shared = _simulate(tmp_path, "shared", "--preset", str(_write(tmp_path / "cpu.yaml", front_end_cpu_s=0.004)))

    def served(result: dict[str, object]) -> float:
        return sum(float(t["goodput_per_s"]) for t in result["summary"]["tiers"])  # type: ignore[index,misc]

    assert served(shared) < served(plain), (served(plain), served(shared))


def test_front_end_quantiles_round_trip_and_a_bad_spread_is_one_line(tmp_path: Path) -> None:
    spread = [0.01, 0.012, 0.013, 0.015, 0.016, 0.018, 0.02, 0.022, 0.025, 0.03, 0.06]
    path = _write(tmp_path / "cal.yaml", front_end_s=0.018, front_end_quantiles_s=spread)
    assert load_preset_file(path).front_end_quantiles_s == spread
    for bad in ([0.02, 0.01], [0.01], [0.01, float("nan")], [-0.01, 0.0], [0.0] * 102):
        path.write_text(dump_preset(dataclasses.replace(PRESETS["tiny"], name="cal"), "test").replace(
            "front_end_quantiles_s: []", f"front_end_quantiles_s: {json.dumps(bad).replace('NaN', '.nan')}"))
        with pytest.raises(ValueError, match="front_end_quantiles_s: must be 2 to 101 non-decreasing") as err:
            load_preset_file(path)
        assert "\n" not in str(err.value)


def test_a_draw_from_quantiles_is_linear_between_them() -> None:
    from rushhour.sim.driver import from_quantiles

    q = [0.0, 0.01, 0.03]
    assert from_quantiles(q, 0.0) == 0.0 and abs(from_quantiles(q, 0.25) - 0.005) < 1e-12
    assert abs(from_quantiles(q, 0.75) - 0.02) < 1e-12 and abs(from_quantiles(q, 0.999999) - 0.03) < 1e-6


def test_a_front_end_spread_is_drawn_per_request_and_the_same_seed_draws_the_same(tmp_path: Path) -> None:
    """With ``front_end_quantiles_s`` each request's delay before the engine is drawn from them: a tail in the
    front end's time (10 % of lone requests between 50 ms and 1 s) reaches the TTFT's p99, which the median alone
    (50 ms for every request) leaves out; the draws follow the scenario's seed."""
    tail = [0.05] * 10 + [1.0]
    light = {"scenario_text": LIGHT, "duration": "30s"}
    constant_file = str(_write(tmp_path / "constant.yaml", front_end_s=0.05))
    constant = _simulate(tmp_path, "constant", "--preset", constant_file, **light)
    spread_file = str(_write(tmp_path / "spread.yaml", front_end_s=0.05, front_end_quantiles_s=tail))
    spread = _simulate(tmp_path, "spread", "--preset", spread_file, **light)
    again = _simulate(tmp_path, "again", "--preset", spread_file, **light)

    def ttft(result: dict[str, object], q: str) -> float:
        tier = next(t for t in result["summary"]["tiers"] if t["name"] == "interactive")  # type: ignore[index]
        return float(tier["latency"]["ttft_ms"][q])

    assert ttft(spread, "p99") >= ttft(constant, "p99") + 200, (ttft(constant, "p99"), ttft(spread, "p99"))
    assert abs(ttft(spread, "p50") - ttft(constant, "p50")) < 10  # the median request's delay is the same 50 ms
    assert [ttft(again, q) for q in ("p50", "p99")] == [ttft(spread, q) for q in ("p50", "p99")]
