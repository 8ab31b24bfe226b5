"""``run.json`` through one type: round trip, old files kept whole, an old-format run still audits."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from rushhour.records.manifest import RUN_MANIFEST, RunManifest, read_manifest, scenario_of, write_manifest


def _full() -> RunManifest:
    return RunManifest(
        run_id="20260101T000000Z-abc123", scenario_name="demo", scenario_source="demo",
        scenario={"name": "demo", "seed": 7}, seed=7, target_url="testbed", resolved_target_url="http://127.0.0.1:1",
        profile="vllm", model="m", dialect="openai", duration_s=60.0, drain_s=5.0, processes=2, mode="simulated",
        simulation={"events": 10, "wall_s": 0.5}, code="compiled (mypyc)",
        versions={"python": "3.12"}, command_line=["rushhour", "run", "demo"], hostname="h",
        locust_command=["python", "-m", "locust"], locust_pid=11, locust_exit_code=0,
        mono_anchor_ns=123, wall_anchor_ns=456, started_at="a", schedule_starts_at="b", ended_at="c",
        route_urls={"primary": "http://127.0.0.1:1"}, testbeds={"primary": {"port": 1, "faults": []}},
        testbed_url="http://127.0.0.1:1", testbed_port=1, testbed_pid=12, testbed_ledger="l", testbed_config="c",
        calibration={"pid": 13, "probes": 2}, stop_reason="completed", error="e", interrupted_during="the load",
        overrun_killed_after_end_s=1.5, disk_full={"during": "the load"}, generator_warning="w",
        shards=["a.jsonl"], workers={"expected": 2, "missing": ["w2"]}, auth={"rejected_total": 2},
        budget_usage={"run": {"requests": 3}}, abort={"kind": "hopeless_slo"}, extra={"from_the_future": [1, 2]},
    )


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    m = _full()
    assert all(getattr(m, f.name) not in (None, "", [], {}) for f in fields(m))  # the test sets every field
    write_manifest(tmp_path, m)
    assert read_manifest(tmp_path) == m
    assert RunManifest.from_json(json.loads(json.dumps(m.to_json()))) == m
    assert not (tmp_path / "run.json.tmp").exists()


def test_old_keys_kept_missing_defaulted_wrong_types_not_trusted(tmp_path: Path) -> None:
    old = {"run_id": "r", "target": {"url": "testbed", "profile": "llm-d"}, "command": "rushhour run x",
           "processes": "two", "seed": True, "mono_anchor_ns": 5}
    m = RunManifest.from_json(old)
    assert m.run_id == "r" and m.mono_anchor_ns == 5
    assert m.processes == 0 and m.seed is None and m.stop_reason is None and m.versions == {}  # defaults
    assert m.extra == {"target": old["target"], "command": "rushhour run x", "processes": "two", "seed": True}
    write_manifest(tmp_path, m)
    assert json.loads((tmp_path / RUN_MANIFEST).read_text()) == old  # written back as it was


def test_unset_fields_are_left_out_and_an_int_is_a_float() -> None:
    assert RunManifest(run_id="r").to_json()["run_id"] == "r"
    assert "stop_reason" not in RunManifest().to_json()
    assert RunManifest.from_json({"duration_s": 60}).duration_s == 60


def test_read_refuses_what_is_not_an_object(tmp_path: Path) -> None:
    (tmp_path / RUN_MANIFEST).write_text("[1]")
    with pytest.raises(ValueError):
        read_manifest(tmp_path)


def test_scenario_of_a_run_json(tmp_path: Path) -> None:
    write_manifest(tmp_path, RunManifest(run_id="r", scenario={"name": "x"}))
    assert scenario_of(tmp_path / RUN_MANIFEST) == {"name": "x"}


def test_an_old_format_run_json_still_audits(tmp_path: Path) -> None:
    """A run.json of the old shape (target as a dict, a string command, no typed writer) is audited."""
    from rushhour.audit.build import audit
    from tests.audit.helpers import RunBuilder

    b = RunBuilder(tmp_path, run_id="old")
    b.request()
    b.close()
    raw = json.loads((b.dir / RUN_MANIFEST).read_text())
    raw.pop("versions")
    raw["command"] = ["rushhour", "run", "old"]
    raw["stop_reason"] = "completed"
    (b.dir / RUN_MANIFEST).write_text(json.dumps(raw))
    summary = audit(b.dir).summary
    assert summary.run.run_id == "old" and summary.run.target == "testbed"
    assert summary.run.command == "rushhour run old" and summary.run.stop_reason == "completed"
    assert summary.run.processes == 1 and summary.run.seed == 3
