"""A hand-built run (real ShardWriter shards, two processes, a truncated and a malformed line) through run_audit."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from helpers import ANCHOR, MS, TIERS, RunBuilder, S

from rushhour.audit import AuditError, load_or_audit, run_audit
from rushhour.audit.summary import Summary
from rushhour.records.record import Anchor

SAT = "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
TTL = "inference error: ResourceExhausted - request timed out in queue: request evicted from queue: request TTL expired"
FLOW = "llm_d_epp_flow_control_requests_total"


def build_run(root: Path) -> Path:
    b = RunBuilder(root)
    # idle calibration probes: 100 ms TTFT at 300 prompt tokens
    for i in range(3):
        b.request(tier="interactive", persona="calibration", sent_ns=i * 100 * MS)
    # interactive: 40 served at 100 ms, one every second
    for i in range(40):
        b.request(tier="interactive", tenant=f"interactive-t{i % 2}", sent_ns=i * S + S // 2)
    # standard: 20 served at 200 ms; 5 of them needed a retry after a 429 rejected-saturated
    for i in range(20):
        t0 = i * 2 * S + S // 4
        if i < 5:
            b.dropped(status=429, reason="rejected-saturated", error=SAT, tier="standard", tenant="standard-t0",
                      persona="chat-standard", logical_id=f"std-{i}", sent_ns=t0, retry_after_s=1.0)
            t0 += S
        b.request(tier="standard", tenant="standard-t0", persona="chat-standard", logical_id=f"std-{i}",
                  attempt=2 if i < 5 else 1, retry_reason="429" if i < 5 else None, sent_ns=t0,
                  intended_ns=t0 - (S if i < 5 else 0), first_token_ns=t0 + 200 * MS)
    # batch, second process on its own anchor (1 s later): times below are relative to that anchor
    late = Anchor(mono_ns=ANCHOR.mono_ns + S, wall_ns=ANCHOR.wall_ns + S)
    b.writer("p2", anchor=late)
    for i in range(10):  # served
        b.request(process="p2", tier="batch", tenant="batch-t0", persona="agents", sent_ns=i * S,
                  first_token_ns=i * S + 300 * MS, task_id="task-ok" if i < 3 else "")
    for i in range(10):  # queue full at 20..29 s (run time)
        b.dropped(process="p2", status=429, reason="rejected-saturated", error=SAT, tier="batch", tenant="batch-t0",
                  persona="agents", sent_ns=(19 + i) * S, task_id="task-bad" if i == 0 else "")
    for i in range(5):  # TTL expiry after 10 s in queue, sent 15..19 s
        b.dropped(process="p2", status=429, reason="rejected-ttl-expired", error=TTL, tier="batch",
                  tenant="batch-t0", persona="agents", sent_ns=(14 + i) * S, wait_ns=10 * S)
    # evicted after its first token
    b.request(process="p2", tier="batch", tenant="batch-t0", persona="agents", sent_ns=21 * S, status=429,
              reason="evicted", complete=False, first_token_ns=21 * S + 100 * MS, done_ns=22 * S)
    # the generator stopped while this one waited
    b.request(tier="standard", tenant="standard-t0", persona="chat-standard", sent_ns=59 * S, status=0,
              cancelled=True, complete=False, headers_ns=None, first_token_ns=None, last_token_ns=None,
              done_ns=60 * S)
    b.task(task_id="task-ok", persona="agents", tier="batch", tenant="batch-t0", start_ns=0, end_ns=10 * S,
           deadline_ns=60 * S, outcome="completed", ideal_ns=5 * S)
    b.task(task_id="task-bad", persona="agents", tier="batch", tenant="batch-t0", start_ns=18 * S, end_ns=21 * S,
           deadline_ns=80 * S, outcome="failed", first_failure="429")
    b.task(task_id="sess-1", persona="chat-interactive", tier="interactive", tenant="interactive-t0",
           session_id="s1", start_ns=0, end_ns=30 * S, outcome="completed")
    for t in range(60):
        b.health(t * S, 2 * MS, 30.0)
    b.breaker(30 * S, "primary", "open", "closed")
    b.breaker(40 * S, "primary", "closed", "open")
    # a baseline scrape before the first request (counters zero), then one a second from 5 s
    b.metrics([
        (ts * S, [
            (FLOW, {"priority": "-1", "outcome": "Dispatched"}, 0.0 if ts < 0 else 11.0 if ts > 30 else 5.0),
            (FLOW, {"priority": "-1", "outcome": "RejectedCapacity"}, 10.0 if ts > 30 else 0.0),
            (FLOW, {"priority": "-1", "outcome": "EvictedTTL"}, 5.0 if ts > 30 else 0.0),
            (FLOW, {"priority": "0", "outcome": "RejectedCapacity"}, 0.0 if ts < 0 else 9.0),  # client saw 5
            ("llm_d_epp_flow_control_queue_size", {"priority": "-1"}, 3.0 if 20 <= ts < 30 else 0.0),
            ("vllm:kv_cache_usage_perc", {"pod": "a"}, 0.5),
            ("vllm:num_preemptions_total", {"pod": "a"}, float(ts // 10)),
        ])
        for ts in [-1, *range(5, 62, 1)]
    ])
    run = b.close()
    # a killed writer's half line, and a corrupt line in the middle of the other shard
    with (run / "records" / "host-p1.jsonl").open("ab") as fh:
        fh.write(b'{"kind":"request","seq":999,"request_id":"cut')
    shard2 = run / "records" / "host-p2.jsonl"
    lines = shard2.read_bytes().split(b"\n")
    lines.insert(3, b'{"kind":"request","seq":"not a number"}')
    lines.insert(4, b"garbage{")
    shard2.write_bytes(b"\n".join(lines))
    return run


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary]:
    run = build_run(tmp_path_factory.mktemp("runs"))
    return run, run_audit(run)


def test_summary_written_and_valid(audited: tuple[Path, Summary]) -> None:
    run, summary = audited
    data = json.loads((run / "summary.json").read_text())
    assert data["schema"] == "rushhour.summary/2"
    assert Summary.model_validate(data) == summary
    assert summary.validity.valid, summary.validity.reasons
    assert summary.validity.skipped_lines == 3  # the half line + two corrupt ones
    assert summary.validity.truncated_shards == 1
    unreadable = [f for f in summary.findings if f.kind == "unreadable_lines"]
    assert unreadable and unreadable[0].data == {"skipped_lines": 3, "truncated_shards": 1}
    assert summary.run.processes == 2
    assert summary.records == 3 + 40 + 25 + 10 + 10 + 5 + 1 + 1
    assert summary.tasks == 3
    assert [t.name for t in summary.tiers] == ["interactive", "standard", "batch"]


def test_tier_counts(audited: tuple[Path, Summary]) -> None:
    _, s = audited
    inter, std, batch = s.tier("interactive"), s.tier("standard"), s.tier("batch")
    assert inter.requests == 40 and inter.by_class["served"] == 40  # calibration probes excluded
    assert std.attempts == 26 and std.requests == 21
    assert std.by_class["served"] == 20 and std.by_class["unfinished"] == 1 and std.by_class["cancelled"] == 0
    assert std.attempts_by_class["queue_full"] == 5
    assert std.retry_amplification == pytest.approx(26 / 21)
    assert std.drop_rate.k == 1 and std.drop_rate.n == 21  # the unfinished one is not served (issue 12)
    assert std.unserved == 1 and std.policy_drop_rate.k == 0
    assert std.by_status == {"200": 20, "429": 5, "0": 1}
    assert std.by_reason == {"rejected-saturated": 5}
    assert std.share_429.k == 5 and std.share_429.n == 26
    assert batch.by_class["queue_full"] == 10 and batch.by_class["queue_timeout"] == 5
    assert batch.by_class["preempted"] == 1 and batch.by_class["served"] == 10
    assert batch.drop_rate.k == 16 and batch.drop_rate.n == 26
    assert batch.drop_rate_by_class["queue_timeout"].k == 5
    assert batch.preempted_after_first_token == 1
    assert batch.by_reason == {"rejected-saturated": 10, "rejected-ttl-expired": 5, "evicted": 1}


def test_latency_and_inflation(audited: tuple[Path, Summary]) -> None:
    _, s = audited
    inter, std = s.tier("interactive"), s.tier("standard")
    assert inter.latency.ttft_ms.p50 == pytest.approx(100.0) and inter.latency.ttft_ms.p99 == pytest.approx(100.0)
    assert inter.latency.e2e_ms.p50 == pytest.approx(500.0)
    assert inter.latency.tpot_ms.p50 == pytest.approx(40.0)  # (500 − 100) ms over 10 tokens after the first
    # retried requests waited 1 s more from their intended time than from their actual send
    assert std.latency.ttft_ms.p50 == pytest.approx(200.0)
    # the unfinished one waited 1 s without a first token: a censored wait, so the max is only a bound
    assert std.latency.ttft_ms.censored == 1 and std.latency.ttft_ms.max == pytest.approx(1000.0)
    assert "max" in std.latency.ttft_ms.lower_bound
    assert std.latency.ttft_from_intended_ms.max == pytest.approx(1200.0)
    assert inter.inflation.source == "calibration"
    assert inter.inflation.idle_ttft_ms == pytest.approx(100.0)
    assert inter.inflation.p50_x == pytest.approx(1.0)
    assert std.inflation.p50_x == pytest.approx(2.0)
    assert len(inter.ttft_cdf_ms["from_send"]) == 101 and len(inter.ttft_cdf_ms["from_intended"]) == 101


def test_anchor_rebase_between_processes(audited: tuple[Path, Summary]) -> None:
    _, s = audited
    # p2 wrote "sent at 19 s" from an anchor 1 s later: the audit places the first queue_full at 20 s (+5 ms)
    first = next(e for e in s.evidence if e.tier == "batch" and e.outcome == "queue_full")
    assert first.t_s == pytest.approx(20.005)


def test_windows_timeline_and_server_series(audited: tuple[Path, Summary]) -> None:
    _, s = audited
    assert s.timeline.bucket_s == 1.0 and len(s.timeline.t) == 60
    batch = s.timeline.tiers["batch"]
    assert sum(batch.unserved["queue_full"]) == 10 and sum(batch.served) == 10
    assert batch.unserved["queue_full"][20] == 1
    assert sum(s.timeline.tiers["standard"].unserved["unfinished"]) == 1
    assert sum(s.timeline.tiers["interactive"].offered) == 40
    # drops from ~20 s to ~30 s (TTL expiries land at 25..29 s, queue-full at 20..29 s); the server's queue agrees
    assert any(w.start_s <= 20.0 and w.end_s >= 30.0 and w.source == "both" for w in s.windows), s.windows
    assert set(s.timeline.server) >= {"queue_size", "kv_cache_usage", "preemptions"}
    assert s.timeline.server["queue_size"]["-1"][25] == 3.0
    assert s.timeline.server["preemptions"]["all"][10] == 1.0
    assert [b["state"] for b in s.timeline.breaker] == ["open", "closed"]
    assert s.routes[0].route == "primary" and s.routes[0].breaker_open_s == pytest.approx(10.0)
    assert s.tier("batch").saturation is not None
    assert s.tier("batch").saturation.by_class["queue_full"] == 10  # type: ignore[union-attr]


def test_fairness_floor_findings(audited: tuple[Path, Summary]) -> None:
    _, s = audited
    inter = s.tier("interactive")
    assert inter.fairness.jain_index == 1.0 and len(inter.fairness.tenants) == 2
    assert {p.persona for p in s.tier("batch").personas} == {"agents"}
    kinds = {f.kind for f in s.findings}
    assert "preempted_in_progress" in kinds
    assert "crosscheck" in kinds
    # batch: waited 10 s in queue with nothing served in between (the TTL expiries)
    assert s.tier("batch").starvation_max_gap_s is not None
    shares = [t.floor.share for t in s.tiers]
    assert all(x is not None for x in shares) and sum(shares) == pytest.approx(1.0)  # type: ignore[arg-type]


def test_crosscheck(audited: tuple[Path, Summary]) -> None:
    _, s = audited
    checks = {(c.priority, c.metric.split("outcome=")[1].rstrip("}")): c for c in s.crosscheck}
    assert checks[(-1, "RejectedCapacity")].client == 10 and checks[(-1, "RejectedCapacity")].matches
    assert checks[(-1, "EvictedTTL")].client == 5 and checks[(-1, "EvictedTTL")].matches
    assert checks[(-1, "Dispatched")].client == 11 and checks[(-1, "Dispatched")].matches
    assert checks[(0, "RejectedCapacity")].client == 5 and not checks[(0, "RejectedCapacity")].matches


def test_tasks_and_sessions(audited: tuple[Path, Summary]) -> None:
    _, s = audited
    tasks = s.tier("batch").tasks
    assert tasks is not None and tasks.n == 2 and tasks.completed == 1 and tasks.failed == 1
    assert tasks.failed_by_class == {"queue_full": 1}
    assert tasks.makespan_inflation_p50_x == pytest.approx(2.0)
    sessions = s.tier("interactive").sessions
    assert sessions is not None and sessions.completed == 1 and s.tier("interactive").tasks is None


def test_evidence_and_verdicts(audited: tuple[Path, Summary]) -> None:
    _, s = audited
    batch_ev = [e for e in s.evidence if e.tier == "batch"]
    assert len(batch_ev) == 16 and batch_ev == sorted(batch_ev, key=lambda e: e.t_s)
    assert all(e.status == 429 for e in batch_ev)
    assert s.passed and s.exit_code == 0
    assert {v.check for v in s.verdicts if v.tier == "interactive"} == {"ttft_ms.p90", "max_drop_rate"}


def test_load_or_audit_uses_fresh_summary(audited: tuple[Path, Summary]) -> None:
    run, summary = audited
    assert load_or_audit(run) == summary
    shard = run / "records" / "host-p1.jsonl"
    later = time.time() + 5
    os.utime(shard, (later, later))  # a newer shard makes the summary stale
    assert load_or_audit(run).records == summary.records


def test_audit_errors(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="not a run folder"):
        run_audit(tmp_path / "missing")
    with pytest.raises(AuditError, match=r"no run\.json"):
        run_audit(tmp_path)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(AuditError, match="unreadable"):
        run_audit(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "x"}))
    with pytest.raises(AuditError, match="no shards"):
        run_audit(tmp_path)


def test_minimal_manifest_without_scenario(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS, duration_s=None)
    (b.dir / "run.json").write_text(json.dumps({"run_id": "bare"}))
    b.request(tier="gold")
    b.dropped(status=503, reason="rejected-no-endpoints", tier="gold")
    s = run_audit(b.close())
    assert s.tier("gold").by_class["overloaded"] == 1 and s.run.run_id == "bare"


def test_the_code_fingerprint_covers_every_package_the_audit_imports() -> None:
    """A stored summary is stale when the code that parsed it changed: the record readers in records/ included."""
    import ast
    from pathlib import Path

    from rushhour import audit

    root = Path(audit.__file__).resolve().parents[1]
    imported: set[str] = set()
    for path in (root / "audit").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            imported |= {n.split(".")[1] for n in names if n.startswith("rushhour.") and n.count(".") >= 1}
    assert "records" in imported, "the walk found no records import: the test would pass on anything"
    unhashed = sorted(imported - set(audit.FINGERPRINTED))
    assert not unhashed, f"audit imports {unhashed} but code_version() does not hash them"
