"""End to end: a synthetic run folder → ``audit.run_audit`` → summary.json → every report renders."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from rushhour.records.manifest import write_manifest
from rushhour.records.record import Anchor, BreakerRecord, HealthRecord, RequestRecord, ShardWriter, TaskRecord

pytestmark = pytest.mark.e2e

S = 1_000_000_000
MS = 1_000_000
HOSTILE = "<script>alert(1)</script></script>"
TIERS: list[dict[str, Any]] = [
    {"name": "interactive", "priority": 100, "slo": {"ttft_ms": {"p99": 3000}, "max_drop_rate": 0.01}},
    {"name": "standard", "priority": 0, "slo": {"ttft_ms": {"p99": 10000}, "max_drop_rate": 0.10}},
    {"name": "batch", "priority": -1, "slo": {"max_drop_rate": 0.5}},
]


def synthetic_run(root: Path, run_id: str = "e2e-run") -> Path:
    """A 60 s, three-tier run saturated from 20 s to 40 s, written the way the runner writes one."""
    run_dir = root / run_id
    anchor = Anchor(mono_ns=1_000 * S, wall_ns=1_780_000_000 * S)
    personas = [
        {"kind": "chat", "name": f"chat-{t['name']}", "tier": t["name"], "arrival": {"rate": 2.0}} for t in TIERS
    ]
    scenario = {
        "name": "e2e",
        "seed": 11,
        "target": {"url": "testbed", "profile": "llm-d"},
        "tiers": TIERS,
        "personas": personas,
        "phases": [{"name": "steady", "duration": 60}],
    }
    write_manifest(
        run_dir,
        {
            "run_id": run_id,
            "scenario": scenario,
            "seed": 11,
            "target": {"url": "testbed", "profile": "llm-d"},
            "mono_anchor_ns": anchor.mono_ns,
            "wall_anchor_ns": anchor.wall_ns,
            "started_at": "2026-05-28T12:00:00+00:00",
            "versions": {"rushhour": "0.1.0"},
            "processes": 1,
            "duration_s": 60.0,
        },
    )
    rng = random.Random(5)
    with ShardWriter(run_dir / "records" / "host-1.jsonl", run_id=run_id, anchor=anchor) as w:
        seq = 0
        for i in range(900):
            tier = TIERS[i % 3]["name"]
            sent = int(i * 60 * S / 900)
            hot = 20 * S <= sent < 40 * S
            seq += 1
            fields: dict[str, Any] = {
                "run_id": run_id,
                "seq": seq,
                "request_id": f"req-{i}",
                "logical_id": f"req-{i}",
                "tier": tier,
                "tenant": f"{tier}-t{i % 2}",
                "persona": f"chat-{tier}",
                "intended_ns": sent,
                "sent_ns": sent,
                "status": 200,
                "complete": True,
                "headers_ns": sent + 50 * MS,
                "tokens": 20,
                "output_tokens": 20,
                "prompt_tokens": 400,
            }
            wait = int(
                (200 + rng.random() * 300)
                * (1 if not hot else {"interactive": 2, "standard": 8, "batch": 40}[tier])
                * MS
            )
            fields.update(
                first_token_ns=sent + wait, last_token_ns=sent + wait + 800 * MS, done_ns=sent + wait + 800 * MS
            )
            drop = hot and ((tier == "batch" and rng.random() < 0.5) or (tier == "standard" and rng.random() < 0.1))
            if drop:
                ttl = rng.random() < 0.2
                fields.update(
                    status=429,
                    complete=False,
                    first_token_ns=None,
                    last_token_ns=None,
                    done_ns=sent + (15 * S if ttl else 5 * MS),
                    tokens=0,
                    output_tokens=None,
                    reason="rejected-ttl-expired" if ttl else "rejected-saturated",
                    retry_after_s=None if ttl else 1.0,
                    error=HOSTILE if i % 7 == 0 else "queue full",
                )
            w.write(RequestRecord(**fields))
        for t in range(60):
            seq += 1
            w.write(HealthRecord(run_id=run_id, seq=seq, ts_ns=t * S, loop_lag_ns=2 * MS, cpu_percent=20.0))
        seq += 1
        w.write(
            BreakerRecord(
                run_id=run_id,
                seq=seq,
                ts_ns=25 * S,
                route="fallback",
                state="open",
                previous="closed",
                cause="timeouts",
            )
        )
        for k in range(10):
            seq += 1
            w.write(
                TaskRecord(
                    run_id=run_id,
                    seq=seq,
                    task_id=f"task-{k}",
                    persona="chat-batch",
                    tier="batch",
                    tenant="batch-t0",
                    start_ns=k * 5 * S,
                    deadline_ns=k * 5 * S + 30 * S,
                    end_ns=k * 5 * S + (40 if k % 3 == 0 else 10) * S,
                    outcome="deadline_missed" if k % 3 == 0 else "completed",
                    steps=3,
                    calls=6,
                )
            )
    return run_dir


def _check_reports(summary: Any, run_dir: Path) -> None:
    from rushhour.audit import report_table
    from rushhour.reports import render_markdown, write_reports

    paths = write_reports(summary, run_dir, report_table(run_dir))
    html = paths["html"].read_text()
    assert "<script>alert(1)" not in html
    for tier in summary.tiers:
        assert f'data-tier="{tier.name}"' in html
    root = ET.fromstring(paths["junit"].read_text())
    assert len(root.findall("testsuite")) >= len(summary.tiers)
    assert summary.run.run_id in render_markdown(summary)


def test_render_from_real_summary(tmp_path: Path) -> None:
    from rushhour import audit

    if not hasattr(audit, "run_audit"):
        pytest.fail("audit.run_audit is missing: the e2e report test needs the audit to build summary.json")
    run_dir = synthetic_run(tmp_path)
    summary = audit.run_audit(run_dir)
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk["run"]["run_id"] == "e2e-run"
    assert [t.name for t in summary.tiers] == ["interactive", "standard", "batch"]
    assert summary.tier("batch").by_status.get("429", 0) > 0
    _check_reports(summary, run_dir)
    rows = (run_dir / "drops.csv").read_text().splitlines()
    assert len(rows) - 1 == summary.tier("batch").by_status["429"] + summary.tier("standard").by_status.get("429", 0)
