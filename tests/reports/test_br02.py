"""``rushhour report --format br0.2``: a testbed run as llm-d-benchmark's benchmark report v0.2, validated by the
published pydantic schema (a copy in tests/fixtures/llm_d_benchmark, which rejects any field it does not name)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from support import REPO, run, rushhour

from rushhour.audit import load_or_audit, report_table
from rushhour.audit.integrity import check_outputs
from rushhour.audit.summary import Summary
from rushhour.reports.br02 import BR02_FILE, EXTENSION, render_br02, render_br02_yaml

pytestmark = pytest.mark.e2e
SCHEMA_COPY = REPO / "tests" / "fixtures" / "llm_d_benchmark"

# Two tiers on the testbed: a warm-up the audit leaves out, then injected 503s and cut streams (not served)
SCENARIO = """
name: br02-tiers
description: two tiers on the testbed, a warm-up left out
seed: 3
target:
  url: testbed
  profile: llm-d
  model: testbed-model
  testbed:
    preset: tiny
    replicas: 1
    faults: [{kind: error, at_s: 1.5, duration_s: 1, rate: 0.5, status: 503, name: errors},
             {kind: stream_cut, at_s: 2.5, duration_s: 1, rate: 0.5, name: cuts}]
  metrics: null
calibration: {probes: 0}
tiers:
  - {name: interactive, priority: 100, slo: {ttft_ms: {p50: 60000}}}
  - {name: batch, priority: -1, objective: batch-sheddable}
personas:
  - {kind: chat, name: chat, tier: interactive, arrival: {process: poisson, rate: 6}, turns: 1,
     prompt_tokens: {dist: uniform, low: 20, high: 200}, output_tokens: {dist: uniform, low: 4, high: 16}}
  - {kind: chat, name: bulk, tier: batch, arrival: {process: poisson, rate: 6}, turns: 1,
     prompt_tokens: {dist: uniform, low: 20, high: 200}, output_tokens: {dist: uniform, low: 4, high: 16}}
phases:
  - {name: warm-up, duration: 1s}
  - {name: peak, duration: 3s}
drain_s: 1
"""


def validate(document: dict[str, Any]) -> Any:
    """The document through llm-d-benchmark's own BenchmarkReportV02 (raises on any field it would reject)."""
    if str(SCHEMA_COPY) not in sys.path:
        sys.path.insert(0, str(SCHEMA_COPY))
    from llmd_br_v0_2 import BenchmarkReportV02  # the published schema, copied unchanged

    return BenchmarkReportV02.model_validate(document)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("br02")
    done, folder, summary = run(SCENARIO, root)
    assert summary is not None, done.stdout[-2000:] + done.stderr[-2000:]
    return folder


@pytest.fixture(scope="module")
def audited(run_dir: Path) -> tuple[Summary, Any]:
    return load_or_audit(run_dir), report_table(run_dir)


def test_cli_writes_a_br02_file_the_published_schema_accepts(run_dir: Path, tmp_path: Path) -> None:
    done = rushhour("report", str(run_dir), "--format", "br0.2")
    assert done.returncode == 0, done.stderr
    path = run_dir / BR02_FILE
    assert str(path.resolve()) in done.stdout
    report = validate(yaml.safe_load(path.read_text()))
    assert report.version == "0.2" and report.run.uid == run_dir.name
    assert check_outputs(run_dir, [BR02_FILE]) is not None  # integrity.json names it (rushhour verify checks it)
    elsewhere = tmp_path / "results" / "br.yaml"  # --out: where a harness wants it, with the experiment's id
    experiment = "rushhour-1765000000-x1"
    assert rushhour("report", str(run_dir), "--format", "br0.2", "--out", str(elsewhere), "--experiment-id",
               experiment).returncode == 0
    moved = validate(yaml.safe_load(elsewhere.read_text()))
    assert moved.run.eid == str(uuid.uuid5(uuid.NAMESPACE_URL, experiment)) and report.run.eid is None
    assert rushhour("report", str(run_dir), "--format", "br0.2", "--out", str(elsewhere.parent)).returncode == 0
    assert (elsewhere.parent / BR02_FILE).read_text() == path.read_text()  # a folder: the file under its name
    refused = rushhour("report", str(run_dir), "--format", "br0.3")
    assert refused.returncode == 2 and "br0.2" in refused.stderr and "Traceback" not in refused.stderr


def test_run_wide_figures_are_the_tiers_requests(audited: tuple[Summary, Any]) -> None:
    summary, table = audited
    document = render_br02(summary, table)
    validate(document)
    aggregate = document["results"]["request_performance"]["aggregate"]
    requests = aggregate["requests"]
    sent = sum(t.drop_rate.n for t in summary.tiers)
    unserved = sum(t.unserved for t in summary.tiers)
    served = sum(t.by_class.get("served", 0) for t in summary.tiers)
    assert requests["total"] == sent and requests["failures"] + requests["incomplete"] == unserved
    assert unserved > 0, "the injected errors turned none away: the test checks nothing about failures"
    assert summary.measurement.excluded_requests > 0, "no warm-up request was left out"
    # the served requests of the measured window, counted from the attempts table, are the tiers' served
    rate = aggregate["throughput"]["request_rate"]["mean"]
    assert rate * summary.measurement.measured_s == pytest.approx(served)
    ttft = aggregate["latency"]["time_to_first_token"]
    assert ttft["units"] == "ms" and ttft["max"] == pytest.approx(max(t.latency.ttft_ms.max or 0 for t in
                                                                          summary.tiers))
    e2e = aggregate["latency"]["request_latency"]
    assert e2e["max"] == pytest.approx(max(t.latency.e2e_ms.max or 0 for t in summary.tiers))
    assert ttft["p0p1"] <= ttft["p50"] <= ttft["p99p9"] <= ttft["max"]
    assert document["results"]["observability"]["drop_rate"] == {"units": "fraction", "mean": unserved / sent}


def test_each_tier_sits_under_the_extension(audited: tuple[Summary, Any]) -> None:
    summary, table = audited
    report = validate(render_br02(summary, table))
    extension = report.results.observability.model_extra[EXTENSION]
    assert [t["name"] for t in extension["tiers"]] == [t.name for t in summary.tiers] == ["interactive", "batch"]
    for mine, tier in zip(extension["tiers"], summary.tiers, strict=True):
        assert mine["served"] == tier.by_class["served"] and mine["not_served"] == tier.unserved
        assert sum(mine["not_served_by_class"].values()) == tier.unserved
        assert mine["latency_ms"]["ttft"]["p99"] == tier.latency.ttft_ms.p99
    verdicts = extension["tiers"][0]["slo"]
    assert [v["check"] for v in verdicts] == ["ttft_ms.p50"] and extension["tiers"][1]["slo"] == []
    assert extension["valid"] == summary.validity.valid and extension["gate_exit_code"] == summary.exit_code


def test_what_rushhour_did_not_measure_is_absent(audited: tuple[Summary, Any]) -> None:
    summary, table = audited
    document = render_br02(summary, table)
    latency = document["results"]["request_performance"]["aggregate"]["latency"]
    assert "inter_token_latency" not in latency  # rushhour keeps each answer's largest gap, not every gap
    assert "session_performance" not in document["results"] and "eid" not in document["run"]
    # a summary alone (no attempts table): no pooled distribution, no token counts, so no workload block
    alone = render_br02(summary, None)
    validate(alone)
    aggregate = alone["results"]["request_performance"]["aggregate"]
    assert "latency" not in aggregate and "input_length" not in aggregate["requests"]
    assert set(aggregate["throughput"]) == {"request_rate"} and "load" not in alone["scenario"]
    # one served answer without a token count: the token rates would undercount, so they are absent, never 0
    partial = table.copy()
    served = (partial["class"].astype(str) == "served").to_numpy()
    last = int(np.argmax(np.where(served, partial["intended_ns"].to_numpy(dtype=np.float64), -np.inf)))  # in peak
    partial.loc[partial.index[last], "output_tokens"] = np.nan
    throughput = render_br02(summary, partial)["results"]["request_performance"]["aggregate"]["throughput"]
    assert "output_token_rate" not in throughput and "total_token_rate" not in throughput
    assert "input_token_rate" in throughput


def test_no_credential_of_the_target_reaches_the_report(audited: tuple[Summary, Any]) -> None:
    summary, table = audited
    secret = summary.model_copy(update={"run": summary.run.model_copy(
        update={"target": "https://user:hunter2@gw.example:8443/v1?api_key=sk-abc#frag"})})
    text = render_br02_yaml(secret, table)
    assert "hunter2" not in text and "sk-abc" not in text and "user" not in text.split("target:")[1].split("\n")[0]
    assert "https://gw.example:8443/v1" in text


def test_a_tier_that_sent_nothing_claims_no_figure(edge: Summary) -> None:
    """report_fixtures' invalid run: a tier with no request has no rate, latency, retry ratio or goodput (not 0)."""
    report = validate(render_br02(edge, None))
    extension = report.results.observability.model_extra[EXTENSION]
    idle = next(t for t in extension["tiers"] if t["name"] == "idle")
    assert idle["requests"] == 0 and idle["sent"] == 0
    for absent in ("retry_amplification", "goodput_per_s", "latency_ms", "policy_not_served_rate", "not_served_rate"):
        assert absent not in idle, (absent, idle)
    assert "observed" not in idle["slo"][0]
    assert extension["valid"] is False
