"""Early abort: hopeless SLOs and over-saturation stop the run, run.json says why, the gate fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import run, rushhour, scenario

from rushhour.audit.early import STOP_HOPELESS, STOP_SATURATION, TierSoFar, Watcher, hopeless, saturated
from rushhour.audit.gates import abort_verdicts
from rushhour.loadgen.prepare import RunOptions, apply_overrides
from rushhour.loadgen.runner import run_scenario
from rushhour.records.manifest import RunManifest, read_manifest
from rushhour.scenarios import ScenarioError, parse_scenario
from rushhour.scenarios.model import SLO, LatencySLO

from .wf_helpers import machine_invalid

# ---------------------------------------------------------------------------------------------- pure decisions


def test_drop_rate_hopeless_only_when_the_lower_bound_is_over() -> None:
    slo = SLO(max_drop_rate=0.1)
    bad = hopeless("batch", slo, TierSoFar(served=10, unserved=30), 20)
    assert bad is not None and bad["stop_reason"] == STOP_HOPELESS and bad["check"] == "max_drop_rate"
    assert bad["bound"] > 0.1 and bad["n"] == 40 and "30 of 40 not served" in bad["message"]
    assert hopeless("batch", slo, TierSoFar(served=38, unserved=2), 20) is None
    # 6 of 10 is bad, but below the minimum number of samples
    assert hopeless("batch", slo, TierSoFar(served=4, unserved=6), 20) is None
    # a request whose retry may still come counts as possibly served: 8 of 40 is not hopeless over 10 %
    assert hopeless("batch", slo, TierSoFar(served=0, unserved=8, pending=32), 20) is None


def test_percentile_hopeless_needs_the_bound_and_its_samples() -> None:
    slo = SLO(ttft_ms=LatencySLO(p50=10))
    assert hopeless("t", slo, TierSoFar(ttft_ms=[50.0] * 4, served=4), 2) is None  # p50 bound needs 5
    bad = hopeless("t", slo, TierSoFar(ttft_ms=[50.0 + i for i in range(30)], served=30), 20)
    assert bad is not None and bad["check"] == "ttft_ms.p50" and bad["bound"] > 10
    # half the requests are fast: p50 may well be under the limit
    mixed = [5.0] * 15 + [50.0] * 15
    assert hopeless("t", slo, TierSoFar(ttft_ms=mixed, served=30), 20) is None
    assert hopeless("t", SLO(ttft_ms=LatencySLO(p50=100)), TierSoFar(ttft_ms=[50.0] * 30, served=30), 20) is None
    # max: one served request over the limit is enough, whatever the count
    top = hopeless("t", SLO(e2e_ms=LatencySLO(max=100)), TierSoFar(e2e_ms=[10.0, 150.0], served=2), 20)
    assert top is not None and top["check"] == "e2e_ms.max"


def test_saturation_signals() -> None:
    grow = saturated([10, 20, 35, 50, 70], [30, 28, 31, 30], [0] * 4, 5)
    assert grow is not None and grow["stop_reason"] == STOP_SATURATION and grow["signal"] == "queue_growth"
    assert "10 → 20 → 35 → 50 → 70" in grow["message"] and "30 → 28 → 31 → 30" in grow["message"]
    # a long-running saturation: a large backlog still growing by 20 %+ with flat throughput
    assert saturated([1000, 1060, 1120, 1180, 1240], [50] * 4, [0] * 4, 5) is not None
    # the same growth while the requests finishing per window climb: a stable load still filling up
    assert saturated([10, 20, 35, 50, 70], [12, 20, 30, 40], [0] * 4, 5) is None
    assert saturated([10, 20, 35, 50, 70], [0, 5, 15, 30], [0] * 4, 5) is None  # hardly anything finished yet
    assert saturated([10, 20, 18, 50, 70], [30] * 4, [0] * 4, 5) is None  # fell once
    assert saturated([40, 41, 42, 43, 44], [30] * 4, [0] * 4, 5) is None  # grew by 4 only
    assert saturated([1000, 1010, 1020, 1030, 1040], [50] * 4, [0] * 4, 5) is None  # by 4 % only
    climb = saturated([5] * 5, [20] * 4, [4, 8, 12, 14], 5)
    assert climb is not None and climb["signal"] == "not_served_climb"
    assert "20 % → 40 % → 60 % → 70 %" in climb["message"]
    assert saturated([5] * 5, [20] * 4, [4, 12, 8, 14], 5) is None  # fell once
    assert saturated([5] * 5, [20] * 4, [16, 16, 17, 18], 5) is None  # high but not climbing by 20 points
    assert saturated([5] * 5, [20, 20, 5, 20], [4, 8, 3, 14], 5) is None  # too few in one window


WATCHED = scenario(seconds=20, abort="abort: {hopeless_slo: true, saturation: true, window_s: 2, windows: 3}")


def _req(t_s: float, *, status: int = 200, ttft_ms: float = 5.0, **extra: object) -> dict[str, object]:
    sent = int(t_s * 1e9)
    return {"kind": "request", "tier": "interactive", "status": status, "complete": status == 200,
            "intended_ns": sent, "sent_ns": sent, "first_token_ns": sent + int(ttft_ms * 1e6),
            "done_ns": sent + int(ttft_ms * 2e6), **extra}


def test_watcher_leaves_out_twins_and_unmeasured_phases() -> None:
    text = WATCHED.replace("  - {name: steady, duration: 20s}",
                           "  - {name: warm-up, duration: 5s}\n  - {name: steady, duration: 20s}")
    watcher = Watcher(parse_scenario(text))
    for i in range(40):
        watcher.feed(_req(1 + i * 0.05, ttft_ms=5000))  # a slow warm-up: not judged
        watcher.feed(_req(6 + i * 0.1, ttft_ms=5000, control=True, twin_of="x"))  # twins: not judged
    assert watcher.tiers == {} and watcher.look(20) is None
    for i in range(40):
        watcher.feed(_req(6 + i * 0.1, ttft_ms=5000))
    decision = watcher.look(12)
    assert decision is not None and decision["check"] == "ttft_ms.p50" and decision["at_s"] == 12


_STEADY = "  - {name: steady, duration: 10s}"
_PEAK_SLO = "slo: {judge: point, phases: {peak: {ttft_ms: {p50: 100}, max_drop_rate: 0.1}}}"
PHASED = (scenario(seconds=10, ttft_p50_ms=None, drop=None, abort="abort: {hopeless_slo: true}")
          .replace(_STEADY, _STEADY + "\n  - {name: peak, duration: 10s}")
          .replace("slo: {judge: point}", _PEAK_SLO)
          + "resilience: {retries: {max_attempts: 2}}\n")


def test_watcher_calls_served_what_the_audit_calls_served() -> None:
    """One definition of "served": the watcher asks the classifier, so an answer the audit would not count as
    served (an error event inside a 200 stream, an abandoned request, a cut stream) never passes as served."""
    import pandas as pd

    from rushhour.audit.classify import classify_frame

    records = [
        _req(6.0),
        _req(6.1, in_band_error="Service Unavailable: the engine is busy"),
        _req(6.2, complete=False),  # a 200 stream cut before its end marker
        _req(6.3, abandoned=True),
        _req(6.4, status=429, reason="rejected-saturated"),
        _req(6.5, status=204),
    ]
    watcher = Watcher(parse_scenario(WATCHED))
    for record in records:
        watcher.feed(record)
    frame = pd.DataFrame(records)
    for flag in ("in_band_error", "abandoned", "complete"):  # absent facts, as the loader fills them
        frame[flag] = frame[flag].where(frame[flag].notna(), None if flag == "in_band_error" else False)
    served = int((classify_frame(frame, "llm-d") == "served").sum())
    tally = watcher.tiers["interactive"]
    assert (tally.served, tally.served + tally.unserved + tally.pending) == (served, len(records))
    assert served == 1


def test_a_per_phase_slo_is_watched_on_its_phase_alone() -> None:
    """slo.phases (issue #17): hopeless is judged on the phase's requests, named as the gate names it.

    Before, only whole-run ttft/e2e/max_drop_rate were watched: a hopeless peak ran to the end.
    """
    watcher = Watcher(parse_scenario(PHASED))
    for i in range(40):  # slow in steady, which has no SLO: nothing to abort on
        watcher.feed(_req(1 + i * 0.2, ttft_ms=5000, logical_id=f"s{i}"))
    assert watcher.look(10) is None and watcher.phase_tiers == {}
    # a request first meant for steady and retried in peak counts in steady, as the audit places it
    watcher.feed(_req(9.9, status=429, logical_id="r", attempt=1))
    watcher.feed(_req(10.5, ttft_ms=5000, logical_id="r", attempt=2))
    assert watcher.phase_tiers == {} and watcher.first_phase == {}
    for i in range(30):
        watcher.feed(_req(11 + i * 0.2, ttft_ms=400 + i, logical_id=f"p{i}"))
    decision = watcher.look(17)
    assert decision is not None and decision["stop_reason"] == STOP_HOPELESS
    assert decision["check"] == "peak: ttft_ms.p50" and decision["phase"] == "peak" and decision["n"] == 30
    assert decision["message"].startswith("interactive peak: ttft_ms.p50: the 99 % lower bound")
    # a phase's drop rate too, and a fast peak is left alone
    drops = Watcher(parse_scenario(PHASED))
    for i in range(30):
        drops.feed(_req(11 + i * 0.2, status=503 if i % 2 else 200, ttft_ms=20, logical_id=f"d{i}", attempt=2))
    bad = drops.look(17)
    assert bad is not None and bad["check"] == "peak: max_drop_rate"
    fine = Watcher(parse_scenario(PHASED))
    for i in range(30):
        fine.feed(_req(11 + i * 0.2, ttft_ms=20, logical_id=f"f{i}"))
    assert fine.look(17) is None


def test_watcher_sees_the_queue_grow() -> None:
    watcher = Watcher(parse_scenario(WATCHED.replace("ttft_ms: {p50: 2000}, ", "")))
    for i in range(20):  # health every second: in flight 0, 10, 20, …; 6 requests finish every second
        watcher.feed({"kind": "health", "ts_ns": int(i * 1e9), "in_flight": 5 * i, "not_sent_total": 5 * i}, "h-1")
        for j in range(6):
            watcher.feed(_req(i + 0.1 * j, ttft_ms=50))
    assert watcher.look(5) is None  # windows 1–2 only: three are needed, and window 0 never counts
    decision = watcher.look(8.5)
    assert decision is not None and decision["signal"] == "queue_growth" and decision["series"] == [20, 40, 60, 80]


def test_abort_verdict_fails_the_gate() -> None:
    manifest = RunManifest(stop_reason=STOP_HOPELESS, duration_s=40,
                           abort={"at_s": 7.5, "tier": "interactive", "message": "interactive ttft_ms.p50: …"})
    (verdict,) = abort_verdicts(manifest)
    assert not verdict.passed and not verdict.inconclusive and verdict.check == "early_abort"
    assert verdict.tier == "interactive" and verdict.observed == 7.5 and verdict.threshold == 40
    assert verdict.message.startswith("run aborted early at 7.5 s: interactive")
    assert abort_verdicts(RunManifest(stop_reason="completed")) == []


def test_abort_flag_and_a_caller_without_a_watcher(tmp_path: Path) -> None:
    base = parse_scenario(scenario())
    assert base.abort is None
    both = apply_overrides(base, RunOptions(abort=["hopeless", "saturation"]))
    assert both.abort is not None and both.abort.hopeless_slo and both.abort.saturation
    none = apply_overrides(parse_scenario(WATCHED), RunOptions(abort=[]))
    assert none.abort is not None and not none.abort.enabled
    with pytest.raises(ScenarioError, match="unknown mode"):
        apply_overrides(base, RunOptions(abort=["hopless"]))
    path = tmp_path / "s.yaml"
    path.write_text(WATCHED)
    with pytest.raises(ScenarioError, match="cannot watch for an early abort"):  # fail closed, nothing started
        run_scenario(str(path), RunOptions(out_dir=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------------------- real runs


def _run(tmp_path: Path, text: str, *args: str) -> tuple[Path, str]:
    done, run_dir, _ = run(text, tmp_path, *args)
    assert done.returncode == 0, done.stderr
    return run_dir, done.stderr


@pytest.mark.e2e
def test_an_impossible_slo_aborts_early_and_fails_the_gate(tmp_path: Path) -> None:
    run_dir, stderr = _run(tmp_path, scenario(seconds=40, ttft_p50_ms=1), "--abort", "hopeless")
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == STOP_HOPELESS, stderr
    assert manifest.abort is not None and manifest.abort["check"] == "ttft_ms.p50"
    assert manifest.abort["at_s"] < 30, manifest.abort  # well before the 40 s planned
    assert "aborting early" in stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    lagged = machine_invalid(run_dir)  # a loaded machine's generator lag: not judged (2), never a pass
    expected = 2 if lagged else 1
    assert summary["run"]["stop_reason"] == STOP_HOPELESS and summary["exit_code"] == expected, lagged
    assert "aborted early" in (run_dir / "report.md").read_text()
    assert "aborted early" in (run_dir / "report.html").read_text()
    gate = rushhour("gate", str(run_dir))
    assert gate.returncode == expected, gate.stdout
    assert "early_abort" in gate.stdout or lagged, gate.stdout
    print(f"aborted at {manifest.abort['at_s']} s of 40: {manifest.abort['message']}")


@pytest.mark.e2e
def test_a_meetable_slo_runs_to_the_end(tmp_path: Path) -> None:
    text = scenario(seconds=12, ttft_p50_ms=2000, drop=0.5,
                    abort="abort: {hopeless_slo: true, saturation: true, window_s: 2, windows: 3}")
    run_dir, stderr = _run(tmp_path, text)
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == "completed" and manifest.abort is None, stderr
    lagged = machine_invalid(run_dir)  # a loaded machine's generator lag: not judged (2), never a pass
    gate = rushhour("gate", str(run_dir))
    assert gate.returncode == (2 if lagged else 0), gate.stdout


@pytest.mark.e2e
def test_an_over_saturated_stack_aborts(tmp_path: Path) -> None:
    """40 arrivals/s against one replica slowed 10×: the queue only grows."""
    text = scenario(seconds=40, ttft_p50_ms=None, drop=None, rate=40, speed=0.1)
    run_dir, stderr = _run(tmp_path, text, "--abort", "saturation", "--no-report")
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == STOP_SATURATION, stderr
    assert manifest.abort is not None and manifest.abort["at_s"] < 30
    gate = rushhour("gate", str(run_dir))
    # non-zero: 1 for the failed early_abort check, or 2 when the generator also ran out of slots (invalid)
    assert gate.returncode in (1, 2) and "early_abort" in gate.stdout, gate.stdout
    print(manifest.abort["message"])


def test_sweep_steps_run_to_their_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep over a scenario with `abort:` is not refused and no step aborts: the knee needs every step."""
    from rushhour import capacity
    from rushhour.loadgen.runner import RunResult
    from rushhour.studies.sweep import PlannedStep

    seen: list[RunOptions] = []

    def fake_run(name: str, options: RunOptions, console: object = None) -> RunResult:
        seen.append(options)
        scenario = apply_overrides(parse_scenario(WATCHED), options)
        assert scenario.abort is not None and not scenario.abort.enabled
        return RunResult(None, 0, "completed")

    monkeypatch.setattr("rushhour.loadgen.runner.run_scenario", fake_run)
    path = tmp_path / "s.yaml"
    path.write_text(WATCHED)
    step = PlannedStep(index=0, scale=1.0, replicas=None, dir=tmp_path / "step", scenario_path=path, duration_s=20)
    assert capacity._runner(1)(step) is None
    assert seen and seen[0].abort == []


def test_a_broken_watcher_never_stops_the_run() -> None:
    """A watcher that raises is switched off with a warning and a note in run.json; the run goes on."""
    from types import SimpleNamespace

    from rushhour.loadgen.runner import _GuardedWatch

    class Broken:
        def feed(self, record: dict[str, object], shard: str = "") -> None:
            raise ValueError("boom")

        def look(self, elapsed_s: float) -> dict[str, object] | None:
            raise AssertionError("never asked once broken")

    said: list[str] = []
    ctx = SimpleNamespace(manifest=RunManifest(), say=said.append)
    guarded = _GuardedWatch(Broken(), ctx)  # type: ignore[arg-type]
    guarded.feed({"kind": "request"})
    guarded.feed({"kind": "request"})
    assert guarded.look(10.0) is None
    assert ctx.manifest.extra["abort_watch_error"] == "ValueError: boom" and len(said) == 1
