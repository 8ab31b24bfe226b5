"""The priority control end to end on the testbed: its ``vllm`` profile honours priority, ``fifo`` does not."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support import run, rushhour

pytestmark = pytest.mark.e2e

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
    proc, run_dir, summary = run(SCENARIO.format(profile=profile), tmp_path / profile, timeout=240)
    assert summary is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "priority vs equal-priority control: interactive" in proc.stdout, proc.stdout[-2000:]
    return {t["name"]: t for t in summary["tiers"]}, run_dir


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


CROSSCHECKED = """
name: e2e-control-crosscheck
seed: 3
target:
  url: testbed
  profile: llm-d
  testbed: {{preset: tiny, replicas: 1}}
calibration: {{probes: 0}}
control: {{share: 0.5}}
tiers:
  - {{name: interactive, priority: 100}}
  - {{name: other, priority: {other}}}
personas:
  - {{kind: chat, name: a, tier: interactive, arrival: {{process: poisson, rate: 4}}, turns: 1, prompt_tokens: 50,
     output_tokens: 8}}
  - {{kind: chat, name: b, tier: other, arrival: {{process: poisson, rate: 4}}, turns: 1, prompt_tokens: 50,
     output_tokens: 8}}
phases:
  - {{name: main, duration: 8s}}
drain_s: 3
"""


@pytest.mark.parametrize("other", [0, -1])
def test_twins_are_counted_where_the_server_files_them(other: int, tmp_path: Path) -> None:
    """On llm-d a twin carries no objective: the EPP files it under priority 0. With a tier at 0 its twins
    and its own requests share the server's count (the client used to count only the tier's: "client
    counted 35 admitted but the server's … rose by 76 priority 0"); with none, the twins have a group of
    their own, compared like any tier's."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(CROSSCHECKED.format(other=other))
    done = rushhour("run", str(scenario), "--out", str(tmp_path / "runs"), "--no-report", timeout=300)
    assert done.returncode == 0, done.stderr
    run_dir = next((tmp_path / "runs").glob("*/run.json")).parent
    from rushhour.audit import run_audit

    summary = run_audit(run_dir)
    twins = int((pq.read_table(run_dir / "attempts.parquet", columns=["control"])["control"]).to_numpy().sum())
    assert twins > 10
    admitted = {c.priority: c for c in summary.crosscheck if "Dispatched" in c.metric}
    assert set(admitted) == {100, 0, other}, summary.crosscheck
    assert admitted[0].tier == ("other" if other == 0 else "control twins")
    own = sum(t.requests for t in summary.tiers if t.name == "other") if other == 0 else 0
    assert admitted[0].client >= twins + own * 0.8 and admitted[0].matches, admitted[0]
    assert all(c.matches for c in summary.crosscheck), summary.crosscheck
    assert [f.message for f in summary.findings if f.kind == "crosscheck"] == []


FAIL_OPEN = """
name: e2e-fail-open
seed: 4
target:
  url: testbed
  profile: llm-d
  model: testbed-model
  testbed: {{preset: tiny, replicas: 1, speed: 0.25{faults}}}
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


@pytest.mark.parametrize("bypassed", [True, False])
def test_a_router_that_failed_open_never_gates_green(bypassed: bool, tmp_path: Path) -> None:
    """llm-d's FailOpen: the gateway skips an unreachable scheduler, so flow control counts nothing and priority
    does nothing. The run fails on `flow_control_enforced`, named as a bypass; the same load through a working
    router gets no such finding or check."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(FAIL_OPEN.format(faults=", faults: [{kind: fail_open}]" if bypassed else ""))
    done = rushhour("run", str(scenario), "--out", str(tmp_path / "runs"), timeout=300)
    run_dir = next((tmp_path / "runs").glob("*/run.json")).parent
    summary = json.loads((run_dir / "summary.json").read_text())
    kinds = {f["kind"] for f in summary["findings"]}
    checks = [v for v in summary["verdicts"] if v["check"] == "flow_control_enforced"]
    effects = {t["name"]: t["priority_effect"]["effect"] for t in summary["tiers"] if t["priority_effect"]}
    print(done.returncode, kinds, effects)
    if bypassed:
        assert "flow_control_bypassed" in kinds, (kinds, effects)
        acted = next(f["data"]["priority_acted"] for f in summary["findings"] if f["kind"] == "flow_control_bypassed")
        assert not any(acted.values()), (acted, effects)
        assert checks and not checks[0]["passed"] and not summary["passed"] and summary["exit_code"] == 1
        ledger = [json.loads(line) for line in (run_dir / "testbed-ledger.jsonl").read_text().splitlines()]
        assert ledger and all(r.get("fault") == "fail_open" for r in ledger if r.get("outcome") == "served")
    else:
        assert not kinds & {"flow_control_bypassed", "flow_control_idle"} and not checks, kinds
