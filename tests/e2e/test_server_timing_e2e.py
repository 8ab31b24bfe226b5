"""Server timing end to end on the testbed: records equal the ledger's times, the audit splits each tier's wait."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from support import cli_command

from rushhour.audit import run_audit
from rushhour.audit.ledger import LEDGER_FILE
from rushhour.records.record import RECORDS_DIR

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "audit" / "scenarios" / "gt-llmd.yaml"
PROFILES = ("llm-d", "vllm", "litellm")
NS = 1e6  # ns per ms
EXACT_NS = 2.0  # a float of ms holds the ledger's ns to well under this


def _scenario(tmp: Path, profile: str) -> Path:
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["name"] = f"timing-{profile}".replace("-", "")
    doc["target"]["profile"] = profile
    doc["phases"] = [{"name": "calm", "duration": "3s", "rate_scale": 1.0}, {"name": "peak", "duration": "5s",
                                                                              "rate_scale": 1.0}]
    doc["drain_s"] = 3
    if profile == "litellm":  # LiteLLM passes vLLM's metrics on whole answers only: the batch jobs take those
        doc["personas"][1]["stream"] = False
    path = tmp / f"{profile}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One short saturating run per profile, at once."""
    procs = {}
    for profile in PROFILES:
        out = tmp_path_factory.mktemp(profile)
        cmd = [*cli_command(script=True), "run", str(_scenario(out, profile)), "--out", str(out), "--no-report"]
        procs[profile] = (out, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                text=True, env={**os.environ, "NO_COLOR": "1"}))
    deadline = time.monotonic() + 120
    found = {}
    for profile, (out, proc) in procs.items():
        try:
            log, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            log, _ = proc.communicate()
            pytest.fail(f"run {profile} did not finish:\n{log[-3000:]}")
        folders = [p for p in out.iterdir() if (p / "run.json").exists()]
        assert proc.returncode in (0, 1, 2) and len(folders) == 1, log[-3000:]
        found[profile] = folders[0]
    return found


def _records(run: Path) -> list[dict]:
    rows = []
    for shard in (run / RECORDS_DIR).glob("*.jsonl"):
        for line in shard.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "request" and rec.get("complete") and rec.get("status") == 200:
                rows.append(rec)
    return rows


@pytest.mark.e2e
@pytest.mark.parametrize("profile", PROFILES)
def test_record_timing_equals_the_ledger(runs: dict[str, Path], profile: str) -> None:
    run = runs[profile]
    ledger = {row["request_id"]: row for row in map(json.loads, (run / LEDGER_FILE).read_text().splitlines())}
    served = _records(run)
    assert len(served) > 20
    queued = 0
    for rec in served:
        truth = ledger[rec["request_id"]]
        # W3C trace context: the server saw the logical request as the trace and the attempt as the span
        assert truth["traceparent"] == f"00-{rec['logical_id']}-{rec['request_id'][:16]}-01", (rec, truth)
        before_engine = truth["dispatch_ns"] - truth["arrival_ns"]
        if profile == "litellm":  # LiteLLM's own time on every answer; vLLM's metrics on whole answers only
            assert abs(rec["litellm_overhead_duration_ms"] * NS - before_engine) <= EXACT_NS, (rec, truth)
            # a whole call ends as the engine ends (its first token and vLLM's generation time), before the answer
            # is written (the ledger's end_ns); a stream's headers go out as the engine takes it
            whole = (before_engine if rec["stream"] else
                     truth["first_token_ns"] + rec["metrics_generation_time_ms"] * NS - truth["arrival_ns"])
            assert abs(rec["litellm_response_duration_ms"] * NS - whole) <= EXACT_NS, (rec, truth)
            if rec["stream"]:
                assert rec.get("metrics_queue_time_ms") is None, rec
                continue
        engine_queue = truth["scheduled_ns"] - truth["dispatch_ns"]
        assert abs(rec["metrics_queue_time_ms"] * NS - engine_queue) <= EXACT_NS, (rec, truth)
        assert rec["metrics_time_to_first_token_ms"] > 0
        gateway = rec.get("gateway_queue_ms")
        if profile == "llm-d":
            assert abs(gateway * NS - before_engine) <= EXACT_NS, (rec, truth)
            queued += gateway > 1.0
        else:
            assert gateway is None  # vLLM alone has no gateway: not reported, never 0
    if profile == "llm-d":
        assert queued > 0, "the saturating run never queued in flow control"
    if profile == "litellm":
        assert {rec["stream"] for rec in served} == {True, False}, "the run had no whole answers, or no streams"


@pytest.mark.e2e
@pytest.mark.parametrize("profile", PROFILES)
def test_audit_splits_each_tier(runs: dict[str, Path], profile: str) -> None:
    summary = run_audit(runs[profile])
    waits = {w.tier: w for w in summary.waits}
    assert set(waits) == {"interactive", "batch"}
    # per phase: every served attempt in the phase its intended send fell in, none twice
    by_phase = {(w.phase, w.tier): w.served for w in summary.waits_by_phase}
    assert {phase for phase, _ in by_phase} == {"calm", "peak"}, by_phase
    for name, tier in waits.items():
        assert sum(n for (_, t), n in by_phase.items() if t == name) == tier.served, (name, by_phase)
    for tier in waits.values():
        parts = {p.part: p for p in tier.parts}
        if profile == "litellm":  # interactive streams (no engine part through LiteLLM), batch takes whole answers
            assert parts["gateway"].reported == tier.served > 0
            assert parts["engine_queue"].reported == parts["decode"].reported == (
                tier.served if tier.tier == "batch" else 0)
            continue
        assert parts["engine_queue"].reported == tier.served > 0
        assert parts["gateway"].reported == (tier.served if profile == "llm-d" else 0)
        shares = sum(p.share or 0.0 for p in tier.parts)
        assert shares == pytest.approx(1.0, abs=1e-6)  # the parts add up to the client's wait
    if profile == "litellm":  # vLLM timed the streams too, whose metrics LiteLLM dropped: the check allows them
        assert summary.timing_checks and all(c.matches for c in summary.timing_checks), summary.timing_checks
        assert not [f for f in summary.findings if f.kind == "timing_mismatch"]
        return
    # the testbed's vLLM histograms (from the ledger's times) against the records' sums: the audit's timing check
    assert [c.metric for c in summary.timing_checks] == ["vllm:request_queue_time_seconds",
                                                         "vllm:request_prefill_time_seconds"]
    assert all(c.matches for c in summary.timing_checks), summary.timing_checks
    assert not [f for f in summary.findings if f.kind == "timing_mismatch"]
    if profile == "llm-d":  # flow control holds the sheddable band, not the interactive one
        batch = {p.part: p for p in waits["batch"].parts}
        interactive = {p.part: p for p in waits["interactive"].parts}
        assert (batch["gateway"].share or 0) > (interactive["gateway"].share or 0)


@pytest.mark.e2e
def test_reports_say_where_each_tier_waited(runs: dict[str, Path]) -> None:
    from rushhour.reports.html import render_html
    from rushhour.reports.markdown import render_markdown

    summary = run_audit(runs["llm-d"])
    markdown = render_markdown(summary)
    assert "### Where each tier waited" in markdown
    assert "batch waited" in markdown and "interactive waited" in markdown
    html = render_html(summary)
    assert 'id="waits"' in html and 'id="wait-bars"' in html and "batch waited" in html
    assert "#### Per phase" in markdown and "| calm | batch |" in markdown and "| peak | batch |" in markdown
    assert 'id="waits-by-phase"' in html and ">calm</td>" in html
    import io

    from rich.console import Console

    from rushhour.reports.terminal import print_terminal

    out = io.StringIO()
    print_terminal(summary, Console(file=out, width=160, no_color=True))
    assert "where it waited: batch waited" in out.getvalue()
    assert "server timing check: metrics_queue_time_ms" in out.getvalue()
