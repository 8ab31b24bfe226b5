"""The one run lifecycle (loadgen/lifecycle.py): its steps, and both entry points taking them rather than copies."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from rushhour.loadgen.lifecycle import Lifecycle, Scrape, new_manifest
from rushhour.records.manifest import read_manifest
from rushhour.records.record import Anchor
from rushhour.scenarios import load_scenario

REPO = Path(__file__).resolve().parents[2]


def _life(tmp_path: Path, **calibration: Any) -> tuple[Lifecycle, Any]:
    scenario = load_scenario("ci-smoke")
    scenario = scenario.model_copy(update={"calibration": scenario.calibration.model_copy(update=calibration)})
    (tmp_path / "records").mkdir()
    return Lifecycle(tmp_path, new_manifest("r1", scenario, "ci-smoke", "http://127.0.0.1:9")), scenario


def test_the_steps_write_run_json_in_order(tmp_path: Path) -> None:
    life, scenario = _life(tmp_path, probes=2, prompt_tokens=[64, 128])
    asked: list[list[int]] = []

    def send(sizes: list[int]) -> dict[str, Any]:
        asked.append(sizes)
        return {"sent": len(sizes)}

    life.calibrate(scenario, send)
    assert asked == [[64, 64, 128, 128]] and life.manifest.calibration == {"sent": 4}
    started = life.manifest.started_at
    life.anchor(Anchor(5, 1_700_000_000_000_000_000))
    saved = read_manifest(tmp_path)  # the anchor step saves; the run's start stays when the probes were `run`'s
    assert (saved.mono_anchor_ns, saved.schedule_starts_at, saved.started_at) == (
        5, "2023-11-14T22:13:20.000Z", started)
    life.anchor(Anchor(6, 1_700_000_000_000_000_000), starts_run=True)  # a locustfile's test starts at its anchor
    assert life.manifest.started_at == "2023-11-14T22:13:20.000Z"
    got: list[Scrape] = []
    life.scraper(scenario, "http://127.0.0.1:9", got.append)
    assert [(s.url, s.profile, s.path) for s in got] == [
        ("http://127.0.0.1:9/metrics", "llm-d", tmp_path / "metrics.jsonl")]
    (tmp_path / "records" / "h-1.jsonl").write_text(json.dumps(
        {"kind": "event", "name": "budget_usage", "shard": "h-1", "detail": {"requests": 3}}) + "\n")
    life.finish("completed", [{"name": "budget_usage", "shard": "h-1", "detail": {"requests": 3}}])
    assert (life.manifest.stop_reason, life.manifest.shards) == ("completed", ["h-1.jsonl"])
    assert life.manifest.ended_at and life.manifest.budget_usage is not None


def test_no_probes_planned_sends_none_and_no_metrics_starts_no_scraper(tmp_path: Path) -> None:
    life, scenario = _life(tmp_path, probes=0)
    assert life.calibrate(scenario, lambda sizes: {"sent": 1}) is None and life.manifest.calibration is None
    quiet = scenario.model_copy(update={"target": scenario.target.model_copy(update={"metrics": None})})
    assert life.scraper(quiet, "http://127.0.0.1:9", lambda where: 1 / 0) is None


def _calls(path: Path) -> set[str]:
    """Names the module calls or constructs (``RunManifest(…)``, ``life.finish(…)``: the last part)."""
    tree = ast.parse(path.read_text())
    return {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            for n in ast.walk(tree) if isinstance(n, ast.Call)}


def test_both_entry_points_take_the_lifecycle_and_build_no_run_json_of_their_own() -> None:
    for module in ("loadgen/runner.py", "loadgen/engine/users.py"):
        calls = _calls(REPO / module)
        assert {"new_manifest", "calibrate", "anchor", "scraper", "finish"} <= calls, module
        assert not {"RunManifest", "merge_budget_usage", "metrics_url", "probe_plan"} & calls, module
