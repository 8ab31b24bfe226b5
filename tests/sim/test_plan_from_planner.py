"""``plan --from-planner``: an llm-d-planner recommendation held to its own profile and to a tiered, bursty mix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_helpers import cli
from support import REPO

from rushhour.scenarios import parse_scenario
from rushhour.scenarios.planner import (
    PRESET_TABLE,
    PlannerError,
    mix_scenario,
    parse_recommendation,
    preset_for,
    profile_scenario,
    read_recommendation,
)
from rushhour.testbed.presets import PRESETS

# Written from llm-d-planner's documented output: DeploymentRecommendation in
# src/planner/shared/schemas/recommendation.py (what POST /api/v1/recommend returns), values of its code_completion
# use case (512 in / 256 out tokens; SLO targets inside data/configuration/usecase_slo_workload.json's ranges).
FIXTURE = REPO / "tests" / "fixtures" / "llm-d-planner-recommendation.json"


def test_the_planners_count_passes_its_profile_and_fails_the_tiered_mix(tmp_path: Path) -> None:
    res = cli("plan", "--from-planner", str(FIXTURE), "--replicas", "3,6", "--duration", "60s", "--gate",
              "--out", str(tmp_path / "runs"))
    # --gate: the planner's 3 replicas miss a tier's SLO under the mix, so the plan fails
    assert res.returncode == 1, res.stdout + res.stderr
    root = next((tmp_path / "runs").glob("plan-*"))
    plan = json.loads((root / "plan.json").read_text())
    check = plan["planner"]
    assert (check["replicas"], check["preset"], check["gpu"]) == (3, "h100-llama8b", "H100")
    assert plan["replicas"] == [3, 6] and plan["scales"] == [1.0]
    # what the simulator says: its own untiered profile meets TTFT/ITL p95 on 3 replicas …
    assert check["profile_status"] == "pass" and check["profile_failing"] == []
    # … the 2× chat peak beside a 30-agent batch swarm does not (chat's TTFT: prefill of the swarm's contexts) …
    assert check["mix_status"] == "fail"
    assert any(f.startswith("chat peak: ttft_ms.p95") for f in check["mix_failing"]), check["mix_failing"]
    assert not any(f.startswith("batch") for f in check["mix_failing"])  # batch waits but is not turned away
    # … and twice the replicas carry the mix
    assert check["mix_replicas_needed"] == 6
    assert check["sentence"] in res.stdout.replace("\n", " ") or check["sentence"][:60] in res.stdout
    assert (root / "planner-profile.yaml").exists() and (root / "planner-mix.yaml").exists()
    assert (root / "planner-profile").is_dir() and "llm-d-planner" in (root / "plan.md").read_text()


def test_hostile_or_unmappable_planner_files_are_one_line_errors(tmp_path: Path) -> None:
    doc = json.loads(FIXTURE.read_text())
    bad = tmp_path / "b200.json"
    bad.write_text(json.dumps({**doc, "gpu_config": {**doc["gpu_config"], "gpu_type": "B200"}}))
    res = cli("plan", "--from-planner", str(bad), "--out", str(tmp_path / "runs"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and "'B200'" in line and "A100-80, H100, L4" in line
    assert not (tmp_path / "runs").exists()  # nothing started
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50_000)
    for path, words in ((deep, "nested deeper"), (tmp_path / "none.json", "cannot read")):
        with pytest.raises(PlannerError, match=words):
            read_recommendation(path)
    for broken, words in (
        ({**doc, "gpu_config": None, "reasoning": "no viable configuration"}, "found no configuration"),
        ({k: v for k, v in doc.items() if k != "traffic_profile"}, "traffic_profile missing"),
        ({**doc, "traffic_profile": {**doc["traffic_profile"], "expected_qps": float("nan")}}, "expected_qps"),
        ({**doc, "slo_targets": {**doc["slo_targets"], "percentile": "mean"}}, "percentile 'mean'"),
        ({**doc, "model_id": "RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic"}, "quantised"),
        ({**doc, "gpu_config": {**doc["gpu_config"], "tensor_parallel": 2}}, "TP 2"),
        ({**doc, "gpu_config": {**doc["gpu_config"], "replicas": True}}, "replicas"),
        ([doc], "not an llm-d-planner recommendation"),
    ):
        with pytest.raises(PlannerError, match=words):
            parse_recommendation(broken, "x.json")
    # a ranked response is read through its first balanced recommendation
    assert parse_recommendation({"balanced": [doc], "best_accuracy": []}).replicas == 3


def test_the_preset_table_names_real_presets_and_the_derived_scenarios_validate() -> None:
    assert {preset for *_, preset in PRESET_TABLE} <= set(PRESETS)
    assert preset_for("NVIDIA-A100-80GB", "meta-llama/Llama-3.3-70B-Instruct", 4) == ("A100-80", "a100-llama70b-tp4")
    rec = read_recommendation(FIXTURE)
    profile = parse_scenario(json.dumps(profile_scenario(rec)))
    assert [t.name for t in profile.tiers] == ["chat"] and profile.target.testbed.replicas == 3
    mix = parse_scenario(json.dumps(mix_scenario(rec, peak=2.5, batch_agents=0)))
    assert [t.name for t in mix.tiers] == ["chat"] and [p.rate_scale for p in mix.phases] == [1.0, 2.5]
