"""``rushhour plan``: a grid of simulated runs → per scale the smallest replicas meeting every SLO, fail closed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_helpers import cli

from rushhour.sim.run import replica_ladder
from rushhour.studies.knee import Step, TierStep
from rushhour.studies.plan import scale_answer, tier_plan

# One chat tier whose TTFT SLO needs replicas as the load grows (tiny replicas, 20-ms steps).
PLANNED = """
name: plan-small
seed: 3
target:
  url: testbed
  profile: llm-d
  testbed: {preset: tiny, replicas: 1, speed: 0.1}
tiers:
  - {name: interactive, priority: 100, slo: {ttft_ms: {p90: 1500}}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {process: poisson, rate: 1.5}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: lognormal, median: 300, sigma: 0.4, max: 1000}
    output_tokens: {dist: lognormal, median: 30, sigma: 0.3, max: 60}
phases:
  - {name: steady, duration: 40s}
calibration: {probes: 0}
drain_s: 5
"""


def test_plan_cli_answers_per_scale_and_writes_the_report(tmp_path: Path) -> None:
    scenario = tmp_path / "plan.yaml"
    scenario.write_text(PLANNED)
    res = cli("plan", str(scenario), "--replicas", "1..4", "--scale", "1,3", "--duration", "40s",
              "--gpu-hour-price", "2.5", "--out", str(tmp_path / "runs"))
    assert res.returncode == 0, res.stderr
    root = next((tmp_path / "runs").glob("plan-*"))
    plan = json.loads((root / "plan.json").read_text())
    assert plan["schema"] == "rushhour.plan/1" and plan["replicas"] == [1, 2, 4] and plan["scales"] == [1.0, 3.0]
    needed = {a["scale"]: a["replicas_needed"] for a in plan["answers"]}
    assert needed[1.0] is not None and needed[3.0] is not None and needed[1.0] <= needed[3.0]
    assert plan["answers"][0]["cost_per_hour"] == pytest.approx(2.5 * needed[1.0])
    html = (root / "plan.html").read_text()
    assert "simulated (virtual time)" in html and "<svg" in html and "replicas needed" in html
    assert "<th class=\"num\">1 replica</th>" in html and "1 replicas" not in html
    assert "Capacity plan" in (root / "plan.md").read_text()
    # every cell is an ordinary simulated run folder the audit wrote a summary for
    cells = list(root.glob("r*-x*/*/summary.json"))
    assert len(cells) == len(plan["sweep"]["steps"]) >= 4
    assert all(json.loads(p.read_text())["run"]["mode"] == "simulated" for p in cells)


def test_plan_gate_fails_closed_when_no_replica_count_meets_the_slo(tmp_path: Path) -> None:
    scenario = tmp_path / "plan.yaml"
    scenario.write_text(PLANNED)
    res = cli("plan", str(scenario), "--replicas", "1", "--scale", "8,9", "--duration", "20s", "--gate",
              "--out", str(tmp_path / "runs"))
    assert res.returncode == 1, res.stderr
    assert "no replica count tried (1) meets every SLO" in res.stdout
    # the cell left out (nothing there could pass) is said where the grid is counted, not only in plan.md
    said = res.stdout + res.stderr
    assert "1 replica, 9×: not run" in said and "1 runs simulated" in said and "(1 not run" in said
    plan = json.loads(next((tmp_path / "runs").glob("plan-*/plan.json")).read_text())
    assert plan["all_answered"] is False and plan["answers"][0]["replicas_needed"] is None


def test_bad_replicas_is_one_line(tmp_path: Path) -> None:
    res = cli("plan", "ci-smoke", "--replicas", "8..x", "--out", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr and "--replicas" in res.stderr


def test_a_scale_past_the_scenarios_limits_is_refused_before_any_cell_runs(tmp_path: Path) -> None:
    """A scaled scenario is checked like a written one: 100,000× ci-smoke would be 200,000 arrivals/s and
    1.6M agents — a run that floods the disk for hours. It used to start (``model_copy`` skips validation)."""
    for verb in (["simulate", "ci-smoke", "--scale", "1000"], ["plan", "ci-smoke", "--scale", "1,1000"]):
        res = cli(*verb, "--out", str(tmp_path / verb[0]))
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        # (100,000× is refused earlier, by the flag's own bound of 1,000×: rushhour/flags.py)
        assert "--scale 1000: personas.0.chat.max_concurrent_sessions: Input should be less than or equal to 100000" \
            in res.stderr
        assert not (tmp_path / verb[0]).exists() or not any((tmp_path / verb[0]).rglob("run.json"))


@pytest.mark.parametrize("verb", [
    ["simulate", "ci-smoke", "--replicas", "1000000000"],  # used to build a billion replicas
    ["plan", "ci-smoke", "--replicas", "1..100000000"],
    ["study", "--simulate", "--quick", "--replicas", "1000000000"],  # used to print pydantic's own error
    ["sweep", "ci-smoke", "--replicas", "1000"],
    ["sweep", "ci-smoke", "--simulate", "--scale", "1..100000", "--steps", "2"],
])
def test_replicas_and_scales_past_the_limits_are_one_line_each(verb: list[str], tmp_path: Path) -> None:
    res = cli(*verb, "--out", str(tmp_path), timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "errors.pydantic.dev" not in res.stderr + res.stdout, res.stderr
    assert res.stderr.startswith("error: "), res.stderr
    assert not any(tmp_path.rglob("run.json"))


def test_replica_ladder() -> None:
    assert replica_ladder("8..512") == [8, 16, 32, 64, 128, 256, 512]
    assert replica_ladder("3..20") == [3, 6, 12, 20]
    assert replica_ladder("4,1,2") == [1, 2, 4]
    with pytest.raises(ValueError):
        replica_ladder("0..4")


def _step(replicas: int, scale: float, status: str, valid: bool = True) -> Step:
    row = TierStep(tier="t", priority=0, requests=10, served=10, offered_rps=scale, goodput_per_s=1.0, goodput=1.0,
                   drop_rate=0.0, drop_low=0.0, drop_high=0.1, ttft_p99_ms=None, ttft_p99_ci=None, e2e_p99_ms=None,
                   status=status, confident=True)  # type: ignore[arg-type]
    return Step(index=0, scale=scale, replicas=replicas, run_dir="", run_id="", seed=1, duration_s=10,
                offered_rps=scale, valid=valid, tiers=[row])


def test_an_invalid_cell_is_never_the_answer() -> None:
    steps = [_step(1, 1.0, "fail"), _step(2, 1.0, "pass", valid=False), _step(4, 1.0, "pass")]
    answer = scale_answer(steps, 1.0, [1, 2, 4])
    assert answer.replicas_needed == 4 and answer.unjudged == [2] and answer.failing == {"1": ["t"]}
    none = scale_answer([_step(1, 2.0, "fail")], 2.0, [1, 2])
    assert none.replicas_needed is None and "no replica count tried" in none.sentence and none.unjudged == [2]
    plan = tier_plan([*steps, _step(4, 2.0, "fail")], "t", [1, 2, 4], [1.0, 2.0])
    assert plan.knee_scale == {"1": None, "2": None, "4": 1.0} and plan.min_replicas == {"1": 4, "2": None}


def test_study_and_sweep_run_in_virtual_time(tmp_path: Path) -> None:
    """``study --simulate --replicas N --scale X``: every cell a simulated run of the scaled base workload."""
    res = cli("study", "--quick", "--simulate", "--replicas", "4", "--scale", "2", "--out", str(tmp_path / "s"))
    assert res.returncode == 0, res.stderr
    # the opening line gives simulated time, not a real-time wall estimate ("about 36 s" for seconds of CPU)
    assert "of simulated time" in res.stderr and "about" not in res.stderr.splitlines()[0]
    study = json.loads(next((tmp_path / "s").glob("study-*/study.json")).read_text())
    assert any("simulated (virtual time)" in n and "× 2" in n and "4 'tiny' replicas" in n for n in study["notes"])
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("study-*/step-*/*/run.json")]
    assert len(manifests) == 3 and all(m["mode"] == "simulated" for m in manifests)
    assert all(m["simulation"]["replicas"] == 4 for m in manifests)
    res = cli("sweep", "ci-smoke", "--simulate", "--scale", "0.5,1", "--step-duration", "10s", "--warmup", "0",
              "--out", str(tmp_path / "w"))
    assert res.returncode == 0, res.stderr
    steps = list((tmp_path / "w").glob("sweep-*/step-*/*/run.json"))
    assert len(steps) == 2 and all(json.loads(p.read_text())["mode"] == "simulated" for p in steps)


def test_a_non_monotone_answer_is_named() -> None:
    from rushhour.studies.knee import SweepResult
    from rushhour.studies.plan import analyse_plan

    steps = [_step(1, 1.0, "fail"), _step(2, 1.0, "pass"), _step(1, 2.0, "pass"), _step(2, 2.0, "pass")]
    sweep = SweepResult(sweep_id="p", scenario="s", mode="simulated", created_at="t", scales=[1.0, 2.0],
                        replicas=[1, 2], steps=steps, knees=[], answers=[])
    plan = analyse_plan(steps, sweep, plan_id="p", scenario="s", created_at="t", replicas=[1, 2], scales=[1.0, 2.0],
                        duration_s=10, preset="tiny")
    assert [a.replicas_needed for a in plan.answers] == [2, 1] and plan.all_answered
    assert any("2× needs fewer replicas (1) than 1× (2)" in n for n in plan.notes)


def _rated(replicas: int, status: str, rps: float) -> Step:
    step = _step(replicas, 1.0, status)
    return step.model_copy(update={"offered_rps": rps})


def test_the_rate_is_the_answering_cells_and_its_dependence_on_replicas_is_said() -> None:
    """Closed-loop personas issue more on more replicas: the sentence names the cell the rate comes from.

    Before, the sentence quoted the smallest replica count's rate ("≈ 3.1 req/s") beside the answer 8.
    """
    from rushhour.reports.plan import render_plan_html, render_plan_markdown
    from rushhour.studies.knee import SweepResult
    from rushhour.studies.plan import analyse_plan

    steps = [_rated(1, "fail", 3.1), _rated(2, "fail", 4.2), _rated(8, "pass", 5.4)]
    answer = scale_answer(steps, 1.0, [1, 2, 8])
    assert answer.replicas_needed == 8 and answer.offered_at_replicas == 8
    assert answer.offered_rps == pytest.approx(5.4)
    assert answer.offered_rps_by_replicas == {"1": 3.1, "2": 4.2, "8": 5.4}
    assert "5.4 req/s issued on 8 replicas; 3.1 req/s to 5.4 req/s across 1–8 replicas" in answer.sentence
    assert "closed-loop personas issue more when answered faster" in answer.sentence and "≈" not in answer.sentence
    sweep = SweepResult(sweep_id="p", scenario="s", mode="simulated", created_at="t", scales=[1.0],
                        replicas=[1, 2, 8], steps=steps, knees=[], answers=[])
    plan = analyse_plan(steps, sweep, plan_id="p", scenario="s", created_at="t", replicas=[1, 2, 8], scales=[1.0],
                        duration_s=10, preset="tiny")
    md = render_plan_markdown(plan)
    assert "| 1× | 5.4 req/s (on 8 replicas; 3.1 req/s to 5.4 req/s across 1–8) | 8 |" in md
    assert "Requests issued: logical requests per second" in md
    html = render_plan_html(plan)
    assert "requests issued" in html and "on 8 replicas; 3.1 req/s to 5.4 req/s across 1–8" in html
    # an open-loop workload issues the same rate on every replica count: said so, one figure
    same = scale_answer([_rated(1, "fail", 6.0), _rated(2, "pass", 6.1)], 1.0, [1, 2])
    assert "6.1 req/s issued, about the same on every replica count run" in same.sentence
    # none answers: the largest replica count run is the one quoted
    none = scale_answer([_rated(1, "fail", 2.0), _rated(2, "fail", 3.0)], 1.0, [1, 2])
    assert none.offered_at_replicas == 2 and "3.0 req/s issued on 2 replicas" in none.sentence


def test_grow_scales_one_persona_on_top_of_the_uniform_scale() -> None:
    """``--grow swarm=5 --grow chat=2``: each named persona by its own factor, then every one by ``--scale``."""
    from rushhour.scenarios import load_scenario
    from rushhour.scenarios.model import AgentSwarmPersona, ChatPersona
    from rushhour.sim.run import parse_grow, scale_scenario

    base = load_scenario("capacity-plan")
    chat = next(p for p in base.personas if isinstance(p, ChatPersona))
    swarm = next(p for p in base.personas if isinstance(p, AgentSwarmPersona))
    grown = scale_scenario(base, 1.5, parse_grow(["swarm=5", "chat=2"]))
    g_chat = next(p for p in grown.personas if isinstance(p, ChatPersona))
    g_swarm = next(p for p in grown.personas if isinstance(p, AgentSwarmPersona))
    assert g_chat.arrival.rate == chat.arrival.rate * 3 and g_swarm.agents == round(swarm.agents * 7.5)
    only = scale_scenario(base, 1.0, {"swarm": 2.0})
    assert next(p for p in only.personas if isinstance(p, ChatPersona)) == chat  # the other persona as it was
    assert scale_scenario(base, 1.0, {}) is base
    for bad in (["swarm"], ["swarm=0"], ["swarm=x"], ["=2"], ["swarm=2", "swarm=3"], ["swarm=inf"]):
        with pytest.raises(ValueError, match="--grow"):
            parse_grow(bad)
    with pytest.raises(ValueError, match="no persona 'agents' in the scenario \\(its personas: chat, swarm\\)"):
        scale_scenario(base, 1.0, {"agents": 2.0})


def test_plan_answers_for_a_grown_persona_in_one_command(tmp_path: Path) -> None:
    """Issue #16's question in one command: "when chat grows 4×, how many replicas?" — the plan simulates the
    grown workload, says so, and its cells' run.json record the growth."""
    scenario = tmp_path / "plan.yaml"
    scenario.write_text(PLANNED)
    res = cli("plan", str(scenario), "--replicas", "1,4", "--scale", "1", "--grow", "chat=4", "--duration", "20s",
              "--out", str(tmp_path / "runs"))
    assert res.returncode == 0, res.stderr
    assert "personas grown before every scale: chat ×4" in res.stdout + res.stderr
    root = next((tmp_path / "runs").glob("plan-*"))
    assert "personas grown before every scale: chat ×4" in (root / "plan.md").read_text()
    cell = json.loads(next(root.glob("r1-x1/*/run.json")).read_text())
    assert cell["scenario"]["personas"][0]["arrival"]["rate"] == 6.0  # 1.5 × 4
    assert cell["simulation"]["grow"] == {"chat": 4.0} and cell["simulation"]["scale"] == 1.0
    bad = cli("plan", str(scenario), "--grow", "bots=2", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: --grow: no persona 'bots'"), bad.stderr
    sim = cli("simulate", str(scenario), "--grow", "chat=2", "--duration", "10s", "--no-report",
              "--out", str(tmp_path / "sim"))
    assert sim.returncode == 0, sim.stderr
    run = json.loads(next((tmp_path / "sim").glob("*/run.json")).read_text())
    assert run["scenario"]["personas"][0]["arrival"]["rate"] == 3.0
