"""SLO gates: pass, fail, invalid (exit 0/1/2); point vs bound judging; SLO file override."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import MS, RunBuilder, S

from rushhour.audit import AuditError, run_audit
from rushhour.audit.gates import EXIT_FAIL, EXIT_INVALID, EXIT_PASS

TIERS_ONE: list[dict[str, Any]] = [
    {"name": "gold", "priority": 10, "slo": {"ttft_ms": {"p90": 500}, "max_drop_rate": 0.02}},
    {"name": "bulk", "priority": -1, "slo": {}},
]


def make_run(root: Path, *, tiers: list[dict[str, Any]] = TIERS_ONE, drops: int = 1, lag_ms: int = 1,
             not_sent: int = 0) -> Path:
    b = RunBuilder(root, tiers=tiers, duration_s=100)
    for i in range(100 - drops):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
    for i in range(drops):
        b.dropped(status=429, reason="rejected-saturated", tier="gold", tenant="g", persona="chat-gold",
                  sent_ns=(99 - i) * S)
    for _ in range(not_sent):
        b.request(tier="bulk", tenant="b", persona="chat-bulk", sent_ns=None, status=0, not_sent=True,
                  complete=False, headers_ns=None, first_token_ns=None, last_token_ns=None, done_ns=None,
                  intended_ns=50 * S)
    for t in range(100):
        b.health(t * S, lag_ms * MS, 10.0, in_flight=3)
    return b.close()


def test_pass(tmp_path: Path) -> None:
    s = run_audit(make_run(tmp_path))
    assert s.validity.valid and s.passed and s.exit_code == EXIT_PASS
    assert {v.check: v.passed for v in s.verdicts} == {"ttft_ms.p90": True, "max_drop_rate": True}


def test_fail(tmp_path: Path) -> None:
    tiers = [{"name": "gold", "priority": 10, "slo": {"ttft_ms": {"p90": 50}}}, TIERS_ONE[1]]
    s = run_audit(make_run(tmp_path, tiers=tiers))
    assert not s.passed and s.exit_code == EXIT_FAIL
    (v,) = s.verdicts
    assert v.check == "ttft_ms.p90" and v.observed == pytest.approx(100.0) and not v.passed


def test_no_slo_is_not_a_pass(tmp_path: Path) -> None:
    # a gate without a single check cannot fail, so it must not pass either (exit 2, named)
    from rushhour.reports.markdown import render_markdown
    from rushhour.reports.sentences import verdict_line

    tiers = [{"name": "gold", "priority": 10, "slo": {}}, TIERS_ONE[1]]
    s = run_audit(make_run(tmp_path, tiers=tiers, drops=60))
    assert s.validity.valid and not s.verdicts
    assert not s.passed and s.exit_code == EXIT_INVALID
    assert verdict_line(s).startswith("NOT JUDGED: no SLO checks were configured")
    assert "NO SLOs" in render_markdown(s)


def test_invalid_generator_lag(tmp_path: Path) -> None:
    s = run_audit(make_run(tmp_path, lag_ms=200))
    assert not s.validity.valid and s.exit_code == EXIT_INVALID and not s.passed
    assert "loop lag" in s.validity.reasons[0]
    assert s.findings[0].kind == "invalid"


def test_invalid_not_sent(tmp_path: Path) -> None:
    s = run_audit(make_run(tmp_path, not_sent=2))
    assert s.exit_code == EXIT_INVALID and s.validity.not_sent == 2
    assert s.tier("bulk").by_class["not_sent"] == 2


def test_point_vs_bound(tmp_path: Path) -> None:
    run = make_run(tmp_path)  # 1 drop in 100: point 1 %, Wilson upper ≈ 5.4 % > 2 %
    point = run_audit(run, judge="point")
    bound = run_audit(run, judge="bound")
    vp = next(v for v in point.verdicts if v.check == "max_drop_rate")
    vb = next(v for v in bound.verdicts if v.check == "max_drop_rate")
    assert vp.passed and vp.observed == pytest.approx(0.01) and vp.judge == "point"
    assert not vb.passed and vb.bound == pytest.approx(0.0545, abs=1e-3) and vb.judge == "bound"
    assert point.exit_code == EXIT_PASS and bound.exit_code == EXIT_FAIL
    # the TTFT is constant: its bootstrap bound is the value itself, so bound judging still passes
    assert next(v for v in bound.verdicts if v.check == "ttft_ms.p90").passed


def test_slo_judge_from_scenario(tmp_path: Path) -> None:
    tiers = [{"name": "gold", "priority": 10, "slo": {"max_drop_rate": 0.02, "judge": "bound"}}, TIERS_ONE[1]]
    s = run_audit(make_run(tmp_path, tiers=tiers))
    assert s.exit_code == EXIT_FAIL and s.verdicts[0].judge == "bound"


def test_slo_file_override(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    slo = tmp_path / "slo.yaml"
    slo.write_text("tiers:\n  gold:\n    min_goodput: 0.999\n    max_429_share: 0.5\n  bulk:\n    max_503_share: 0.1\n")
    s = run_audit(run, slo_file=slo)
    checks = {(v.tier, v.check): v.passed for v in s.verdicts}
    assert checks == {("gold", "min_goodput"): False, ("gold", "max_429_share"): True,
                      ("bulk", "max_503_share"): False}  # bulk had no requests: nothing to judge is a fail
    assert s.exit_code == EXIT_FAIL
    slo.write_text("tiers:\n  nosuch: {}\n")
    with pytest.raises(AuditError, match="unknown tier"):
        run_audit(run, slo_file=slo)
    slo.write_text("tiers:\n  gold: {max_drop_rate: 7}\n")
    with pytest.raises(AuditError, match="gold"):
        run_audit(run, slo_file=slo)
    with pytest.raises(AuditError, match="judge"):
        run_audit(run, judge="median")


def test_floor_and_deadline_gates(tmp_path: Path) -> None:
    tiers = [{"name": "gold", "priority": 10, "slo": {}},
             {"name": "bulk", "priority": -1, "slo": {"floor_share": 0.2, "max_deadline_miss_rate": 0.1}}]
    b = RunBuilder(tmp_path, tiers=tiers, duration_s=20)
    for i in range(10):  # saturation 0..10 s: gold served, bulk dropped, one bulk served
        b.request(tier="gold", persona="chat-gold", sent_ns=i * S)
        b.dropped(status=429, reason="rejected-saturated", tier="bulk", persona="agents", sent_ns=i * S)
    b.request(tier="bulk", persona="agents", sent_ns=5 * S)
    b.task(task_id="t1", persona="agents", tier="bulk", tenant="b", start_ns=0, end_ns=15 * S, deadline_ns=10 * S,
           outcome="completed")
    s = run_audit(b.close())
    bulk = s.tier("bulk")
    assert bulk.floor.share == pytest.approx(1 / 11) and bulk.floor.passed is False
    checks = {v.check: v.passed for v in s.verdicts}
    assert checks == {"floor_share": False, "tasks.max_deadline_miss_rate": False}
    assert bulk.tasks is not None and bulk.tasks.deadline_missed == 1 and bulk.tasks.completed == 0
    assert any(f.kind == "floor" for f in s.findings)
    assert any(f.kind == "inversion" for f in s.findings) is False  # gold never dropped


def test_budget_refusals_do_not_invalidate(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS_ONE, duration_s=10)
    b.request(tier="gold", persona="chat-gold", sent_ns=S)
    b.request(tier="gold", persona="chat-gold", sent_ns=2 * S, status=0, not_sent=True, reason="budget",
              complete=False, headers_ns=None, first_token_ns=None, last_token_ns=None, done_ns=None)
    s = run_audit(b.close())
    assert s.validity.valid and s.validity.not_sent == 0
    assert s.tier("gold").by_class["not_sent"] == 1 and s.tier("gold").drop_rate.n == 1



def test_lag_with_nothing_in_flight_does_not_invalidate(tmp_path: Path) -> None:
    """A worker's start-up lag, before any request is in flight, distorts no recorded time."""
    b = RunBuilder(tmp_path, tiers=TIERS_ONE, duration_s=20)
    for i in range(20):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
    b.health(0, 300 * MS, 50.0, in_flight=0)  # start-up: imports, spawning
    for t in range(1, 20):
        b.health(t * S, 2 * MS, 10.0, in_flight=1)
    s = run_audit(b.close())
    assert s.validity.valid and s.validity.loop_lag_p99_ms == pytest.approx(2.0)


def test_status_by_class_keeps_the_wire_status(tmp_path: Path) -> None:
    s = run_audit(make_run(tmp_path, drops=3))
    assert s.tier("gold").status_by_class == {"served": {"200": 97}, "queue_full": {"429": 3}}


def test_a_worker_that_died_makes_the_run_invalid(tmp_path: Path) -> None:
    from rushhour.records.record import EventRecord

    b = RunBuilder(tmp_path, tiers=TIERS_ONE, duration_s=20)
    for i in range(20):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
    for proc in ("p1", "p2"):
        w = b.writer(proc)
        w.write(EventRecord("r1", w.next_seq(), 0, "worker_start", {}))
    w = b.writer("p1")
    w.write(EventRecord("r1", w.next_seq(), 20 * S, "worker_stop", {"reason": "completed"}))  # p2 was killed
    s = run_audit(b.close())
    assert s.exit_code == EXIT_INVALID and "died mid-run" in s.validity.reasons[0]


def test_a_target_that_never_answered_makes_the_run_invalid(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS_ONE, duration_s=20)
    for i in range(10):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S, status=0, transport_error=True,
                  complete=False, headers_ns=None, first_token_ns=None, last_token_ns=None, done_ns=i * S + MS,
                  error="ECONNREFUSED")
    s = run_audit(b.close())
    assert s.exit_code == EXIT_INVALID
    assert any("no attempt got an HTTP response" in r for r in s.validity.reasons)


# --------------------------------------------------------------------------- fail closed (issue 12)


def _few(root: Path, n: int, slo: dict[str, Any]) -> Path:
    b = RunBuilder(root, tiers=[{"name": "gold", "priority": 10, "slo": slo}], duration_s=20)
    for i in range(n):
        t0 = i * S // 4
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=t0, first_token_ns=t0 + 100 * MS)
    return b.close()


def test_p99_on_one_sample_is_inconclusive_not_a_pass(tmp_path: Path) -> None:
    """Before: interactive passed ttft_ms.p99 on one sample. Now: point → inconclusive (exit 2), bound → fail."""
    run = _few(tmp_path, 1, {"ttft_ms": {"p99": 500}})
    point = run_audit(run, judge="point")
    (v,) = point.verdicts
    assert not v.passed and v.inconclusive and "1 sample(s), p99 needs ≥ 100" in v.message
    assert point.exit_code == EXIT_INVALID and not point.passed
    bound = run_audit(run, judge="bound")
    (vb,) = bound.verdicts
    assert not vb.passed and not vb.inconclusive and "≥ 299" in vb.message
    assert bound.exit_code == EXIT_FAIL


def test_minimum_sample_sizes() -> None:
    from rushhour.audit.gates import min_samples

    assert [min_samples(k, "point") for k in ("p50", "p90", "p95", "p99")] == [2, 10, 20, 100]
    assert [min_samples(k, "bound") for k in ("p50", "p90", "p95", "p99")] == [5, 29, 59, 299]
    assert min_samples("max", "bound") == 1


def test_enough_samples_are_judged(tmp_path: Path) -> None:
    s = run_audit(_few(tmp_path, 29, {"ttft_ms": {"p90": 500}}), judge="bound")
    assert s.verdicts[0].passed and s.exit_code == EXIT_PASS


def _censored(root: Path, cut_after_s: float) -> Path:
    """10 served at 100 ms, 10 the run cut without a first token after ``cut_after_s``."""
    b = RunBuilder(root, tiers=[{"name": "gold", "priority": 10, "slo": {"ttft_ms": {"p90": 5000}}}],
                   duration_s=30)
    for i in range(10):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
    for i in range(10):
        sent = 10 * S + i * MS
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=sent, status=0, cancelled=True,
                  complete=False, headers_ns=None, first_token_ns=None, last_token_ns=None,
                  done_ns=sent + int(cut_after_s * S))
    return b.close()


def test_censored_percentile_above_the_limit_fails(tmp_path: Path) -> None:
    s = run_audit(_censored(tmp_path, 12.2))
    ttft = s.tier("gold").latency.ttft_ms
    assert ttft.censored == 10 and "p90" in ttft.lower_bound and ttft.p90 == pytest.approx(12200.0)
    (v,) = s.verdicts
    assert not v.passed and not v.inconclusive and "at least" in v.message and s.exit_code == EXIT_FAIL


def test_censored_percentile_below_the_limit_is_inconclusive(tmp_path: Path) -> None:
    s = run_audit(_censored(tmp_path, 1.0))
    (v,) = s.verdicts
    assert v.inconclusive and not v.passed and s.exit_code == EXIT_INVALID


def test_no_preemption_of_requests_in_progress(tmp_path: Path) -> None:
    """slo.max_preempted_in_progress: 0 is the promise "no preemption of requests in progress": an llm-d
    revocation's 429 evicted (before any byte) counts against it, as a stream evicted after its first token."""
    tiers: list[dict[str, Any]] = [
        {"name": "gold", "priority": 10, "slo": {"max_drop_rate": 0.5}},
        {"name": "bulk", "priority": -1, "slo": {"max_preempted_in_progress": 0}},
    ]
    b = RunBuilder(tmp_path, tiers=tiers, duration_s=100)
    for i in range(40):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
        b.request(tier="bulk", tenant="b", persona="chat-bulk", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
    for i in range(3):  # revoked while running, before any byte
        b.dropped(status=429, reason="evicted", tier="bulk", tenant="b", persona="chat-bulk", sent_ns=(50 + i) * S,
                  error="request evicted by flow control")
    for t in range(100):
        b.health(t * S, MS, 10.0, in_flight=3)
    s = run_audit(b.close())
    bulk = s.tier("bulk")
    assert bulk.preempted_in_progress == 3 and bulk.preempted_after_first_token == 0
    (v,) = [v for v in s.verdicts if v.check == "max_preempted_in_progress"]
    assert (v.tier, v.observed, v.threshold, v.passed) == ("bulk", 3.0, 0.0, False)
    assert v.message == "bulk max_preempted_in_progress: 3 request(s) killed in progress not ≤ 0"
    assert not s.passed and s.exit_code == EXIT_FAIL
    (f,) = [f for f in s.findings if f.kind == "preempted_in_progress"]
    assert f.tier == "bulk" and f.data == {"count": 0, "in_progress": 3}


def test_a_stream_cut_mid_answer_never_keeps_the_no_preemption_promise(tmp_path: Path) -> None:
    """A revoked stream is cut after its 200, like a network cut: with no request named preempted, a cut stream
    still fails max_preempted_in_progress: 0 (fail closed), and the message says it may have been either."""
    tiers: list[dict[str, Any]] = [{"name": "bulk", "priority": -1, "slo": {"max_preempted_in_progress": 0}}]
    b = RunBuilder(tmp_path, tiers=tiers, duration_s=100)
    for i in range(40):
        b.request(tier="bulk", tenant="b", persona="chat-bulk", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
    b.request(tier="bulk", tenant="b", persona="chat-bulk", sent_ns=60 * S, first_token_ns=60 * S + 100 * MS,
              complete=False)  # the stream's 200 and first tokens came, its end never did
    for t in range(100):
        b.health(t * S, MS, 10.0, in_flight=3)
    s = run_audit(b.close())
    assert s.tier("bulk").preempted_in_progress == 0 and s.tier("bulk").attempts_by_class.get("failed") == 1
    (v,) = [v for v in s.verdicts if v.check == "max_preempted_in_progress"]
    assert (v.observed, v.bound, v.passed) == (0.0, 1.0, False)
    assert "1 stream(s) cut mid-answer, a kill or the network's" in v.message
    assert not s.passed and s.exit_code == EXIT_FAIL
