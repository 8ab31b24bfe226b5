"""``rushhour simulate``: the same run folder as a real run, marked simulated, read by the audit unchanged."""

from __future__ import annotations

import json
from pathlib import Path

from sim_helpers import SATURATED, cli, only_run

from rushhour.audit import run_audit
from rushhour.sim.run import SimOptions, simulate


def test_cli_simulates_audits_and_marks_the_mode(tmp_path: Path) -> None:
    res = cli("simulate", "ci-smoke", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "× real time" in res.stderr
    run_dir = only_run(tmp_path)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["mode"] == "simulated" and manifest["stop_reason"] == "completed"
    assert manifest["simulation"]["replicas"] == 2 and manifest["simulation"]["events"] > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["mode"] == "simulated"
    assert summary["validity"]["valid"], summary["validity"]
    tiers = {t["name"]: t for t in summary["tiers"]}
    assert tiers["interactive"]["by_class"].get("served", 0) > 50
    assert tiers["batch"]["tasks"]["n"] > 0  # the agent swarm ran tasks
    assert "simulated (virtual time)" in (run_dir / "report.html").read_text()
    assert "simulated (virtual time)" in (run_dir / "report.md").read_text()
    # gate reads it like any run
    assert cli("gate", str(run_dir)).returncode == 0


def test_a_real_run_is_not_marked(tmp_path: Path) -> None:
    """The mode defaults to real: run.json of a real run has no mode key, the summary says real."""
    from rushhour.records.manifest import RunManifest

    assert "mode" not in RunManifest(run_id="x").to_json()
    assert RunManifest.from_json({"run_id": "x"}).mode == ""


def test_same_seed_same_records(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SATURATED)
    a = simulate(str(scenario), SimOptions(out_dir=tmp_path / "a"))
    b = simulate(str(scenario), SimOptions(out_dir=tmp_path / "b"))

    def facts(run_dir: Path) -> list[tuple[object, ...]]:
        rows = []
        for line in next((run_dir / "records").glob("*.jsonl")).read_text().splitlines()[1:]:
            d = json.loads(line)
            if d["kind"] == "request":
                rows.append((d["tier"], d["intended_ns"], d["first_token_ns"], d["status"], d["reason"]))
        return rows

    assert facts(a.run_dir) == facts(b.run_dir) and len(facts(a.run_dir)) > 100


def test_flow_control_classes_reach_the_audit(tmp_path: Path) -> None:
    """Band overflow and TTL expiry come out as the llm-d wire facts and the audit's classes."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SATURATED)
    result = simulate(str(scenario), SimOptions(out_dir=tmp_path))
    lines = [json.loads(x) for x in next((result.run_dir / "records").glob("*.jsonl")).read_text().splitlines()[1:]]
    reasons = {(d["status"], d["reason"]) for d in lines if d["kind"] == "request" and d["tier"] == "batch"}
    assert (429, "rejected-saturated") in reasons and (429, "rejected-ttl-expired") in reasons
    summary = run_audit(result.run_dir)
    batch = summary.tier("batch")
    assert batch.by_class.get("queue_full", 0) > 0 and batch.by_class.get("queue_timeout", 0) > 0
    assert summary.records > 0 and batch.by_status.get("429", 0) == (
        batch.attempts_by_class.get("queue_full", 0) + batch.attempts_by_class.get("queue_timeout", 0))


def test_bad_scenario_is_one_line(tmp_path: Path) -> None:
    res = cli("simulate", str(tmp_path / "missing.yaml"), "--out", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().startswith("error:") and len(res.stderr.strip().splitlines()) <= 2


def test_what_is_not_simulated_is_named(tmp_path: Path) -> None:
    """A scenario with retries (simulated since the personas are one code path) and an early abort (not
    simulated) retries, runs to its end, and run.json says so."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SATURATED.replace("drain_s: 3", "drain_s: 3\nresilience: {retries: {max_attempts: 3}}\n"
                                          "abort: {saturation: true}"))
    result = simulate(str(scenario), SimOptions(out_dir=tmp_path, duration="5s"))
    manifest = json.loads((result.run_dir / "run.json").read_text())
    assert manifest["simulation"]["not_modelled"] == ["early abort (the run goes to its end)"]
    lines = [json.loads(x) for x in next((result.run_dir / "records").glob("*.jsonl")).read_text().splitlines()[1:]]
    retried = [d for d in lines if d["kind"] == "request" and d["attempt"] > 1]
    assert retried and all(d["retry_reason"] for d in retried)
    from rushhour.scenarios import load_scenario
    from rushhour.sim.run import not_modelled

    # its sub-agents are simulated, its tool-call answers are not
    assert not_modelled(load_scenario("coding-agents")) == ["tool-call answers (every answer is text)"]


def test_faults_are_simulated(tmp_path: Path) -> None:
    """An injected-error window and a replica outage (testbed fault schedule, from t = 0) reach the records."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SATURATED.replace("    config:\n", "    faults:\n"
                                          "      - {kind: error, at_s: 0.2, duration_s: 0.2, status: 503}\n"
                                          "      - {kind: replica_down, at_s: 1.0, duration_s: 0.3}\n"
                                          "    config:\n"))
    result = simulate(str(scenario), SimOptions(out_dir=tmp_path))
    lines = [json.loads(x) for x in next((result.run_dir / "records").glob("*.jsonl")).read_text().splitlines()[1:]]
    reqs = [d for d in lines if d["kind"] == "request" and d["sent_ns"] is not None]
    injected = [d for d in reqs if 2e9 <= d["sent_ns"] < 4e9]
    assert injected and all(d["status"] == 503 for d in injected)
    down = [d for d in reqs if 10e9 <= d["sent_ns"] < 13e9]
    # no endpoint for 3 s: llm-d holds arrivals in its queue, nothing is answered until the replica is back
    assert down and all(d["first_token_ns"] is None or d["first_token_ns"] >= 13e9 for d in down)
    cut = [d for d in reqs if d["status"] == 200 and d["sent_ns"] < 10e9 and (d["done_ns"] or 0) >= 10e9
           and d["first_token_ns"] is not None and d["first_token_ns"] < 10e9]
    assert cut and all(not d["complete"] and d["error"] for d in cut)  # streams cut by the outage
    summary = run_audit(result.run_dir)
    assert sum(summary.tier(t).unserved for t in ("interactive", "batch")) >= len(injected) + len(cut)


def test_a_real_targets_profile_runs_as_the_testbeds_imitation_and_says_so(tmp_path: Path) -> None:
    res = cli("simulate", "vllm-priority", "--duration", "5s", "--no-report", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "was not contacted" in res.stderr
    manifest = json.loads((only_run(tmp_path) / "run.json").read_text())
    assert "imitation (vllm" in manifest["simulation"]["imitates"]


def test_the_simulated_stack_says_where_each_tier_waited(tmp_path: Path) -> None:
    """The simulated servers report their own timing as the HTTP testbed does (testbed/timing.py): each served
    attempt's gateway queue and vLLM's queue and prefill, which in virtual time add up to the client's whole wait
    (no wire, no client lag)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SATURATED)
    result = simulate(str(scenario), SimOptions(out_dir=tmp_path))
    lines = [json.loads(x) for x in next((result.run_dir / "records").glob("*.jsonl")).read_text().splitlines()[1:]]
    served = [d for d in lines if d["kind"] == "request" and d["status"] == 200 and d.get("complete")]
    assert served
    for d in served:
        parts = d["gateway_queue_ms"] + d["metrics_queue_time_ms"] + d["metrics_time_to_first_token_ms"]
        assert abs((d["first_token_ns"] - d["intended_ns"]) / 1e6 - parts) < 1e-3, d
        assert d["metrics_generation_time_ms"] >= 0 and d["metrics_tokens_per_second"] > 0
    waits = {w.tier: w for w in run_audit(result.run_dir).waits}
    assert set(waits) == {"interactive", "batch"}
    for tier in waits.values():
        parts = {p.part: p for p in tier.parts}
        assert parts["gateway"].reported == parts["engine_queue"].reported == tier.served > 0
        assert abs(parts["rest"].sum_ms or 0.0) < 1e-3 * tier.served  # nothing unexplained in virtual time
