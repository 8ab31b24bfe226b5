"""Regressions for reviewed audit bugs: each test builds the smallest run that showed the bug."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from helpers import MS, RunBuilder, S

from rushhour.audit.build import audit_run
from rushhour.audit.metrics import _rebase
from rushhour.audit.summary import Summary, TierSummary
from rushhour.records.record import Anchor
from rushhour.reports import sentences

SAT = "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
TIERS: list[dict[str, Any]] = [
    {"name": "interactive", "priority": 100, "slo": {}},
    {"name": "batch", "priority": -1, "slo": {"floor_share": 0.1, "max_429_share": 0.5}},
]
BATCH: dict[str, Any] = {"tier": "batch", "tenant": "batch-t0", "persona": "agents"}
INTER: dict[str, Any] = {"tier": "interactive", "tenant": "interactive-t0", "persona": "chat-interactive"}
NO_RESPONSE: dict[str, Any] = {"status": 0, "complete": False, "headers_ns": None, "first_token_ns": None,
                               "last_token_ns": None}


def _tier(summary: Summary, name: str) -> TierSummary:
    return next(t for t in summary.tiers if t.name == name)


def _drop(b: RunBuilder, sent_ns: int, who: dict[str, Any] = BATCH, **kw: Any) -> None:
    b.dropped(status=429, reason="rejected-saturated", error=SAT, sent_ns=sent_ns, **who, **kw)


def test_floor_fails_when_windows_exist_but_no_goodput_in_them(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS)
    for i in range(20):
        _drop(b, 10 * S + i * S // 2)
        _drop(b, 10 * S + i * S // 2 + 1, INTER)
    s = audit_run(b.close())
    assert s.windows
    batch = _tier(s, "batch")
    assert batch.floor.share == 0.0 and batch.floor.passed is False
    verdict = next(v for v in s.verdicts if v.tier == "batch" and v.check == "floor_share")
    assert verdict.passed is False
    assert "no tier got any goodput during saturation" in verdict.message
    assert any(f.kind == "floor" and f.tier == "batch" for f in s.findings)
    assert not s.passed


def test_floor_unjudged_without_windows_and_sentence_says_so(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS)
    for i in range(10):
        b.request(sent_ns=i * S, **BATCH)
    s = audit_run(b.close())
    batch = _tier(s, "batch")
    assert not s.windows and batch.floor.passed is None
    floor = next(v for v in s.verdicts if v.check == "floor_share")  # issue 34: vacuous, no pass
    assert floor.vacuous and floor.passed is False and floor.message.endswith("vacuous: no saturation window")
    assert s.exit_code == 0  # max_429_share judged and passed beside it: the tier is judged
    line = sentences.fairness_line(batch)
    assert "floor not judged (no saturation)" in line
    assert "NOT held" not in line


def test_unfinished_requests_count_as_not_served(tmp_path: Path) -> None:
    """Issue 12: requests the run cut are not allowed to vanish from the denominator (they did: 2 of 6)."""
    b = RunBuilder(tmp_path, tiers=TIERS)
    for i in range(4):
        b.request(sent_ns=i * S, **BATCH)
    for i in range(2):
        _drop(b, 5 * S + i * S)
    for i in range(4):  # still running when the generator stopped
        b.request(sent_ns=55 * S + i, cancelled=True, done_ns=60 * S, **NO_RESPONSE, **BATCH)
    s = audit_run(b.close())
    batch = _tier(s, "batch")
    assert batch.by_class["unfinished"] == 4 and batch.by_class["cancelled"] == 0
    assert (batch.drop_rate.k, batch.drop_rate.n) == (6, 10) and batch.unserved == 6
    assert (batch.policy_drop_rate.k, batch.policy_drop_rate.n) == (2, 10)
    assert batch.drop_rate_by_class["unfinished"].k == 4
    whole = sentences.whole_run_line(batch)
    assert "40 % served" in whole and "60 % [" in whole and "not served" in whole
    tier = batch.model_copy(update={"saturation": None})
    line = sentences.tier_line(s.model_copy(update={"windows": []}), tier)
    assert "60 % not served" in line and "40 % unfinished at run end" in line
    assert "20 % queue full 429" in line and "p99 ≥ 5.00 s" in line
    assert "never dropped" not in line and sentences.never_dropped(s) == ""
    assert sentences.unfinished_line(s).startswith("4 request(s) were still unfinished when the run ended (drain")
    assert "4 of batch" in sentences.unfinished_line(s)


def test_saturation_sentence_counts_unfinished(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS)
    for i in range(4):
        b.request(sent_ns=10 * S + i * S // 4, **BATCH)
    for i in range(2):
        _drop(b, 11 * S + i * S // 4)
    for i in range(4):
        b.request(sent_ns=11 * S + i * S // 8, cancelled=True, done_ns=12 * S, **NO_RESPONSE, **BATCH)
    s = audit_run(b.close())
    batch = _tier(s, "batch")
    assert batch.saturation is not None and batch.saturation.drop_rate.n == 6
    assert batch.saturation.ttft_ms.censored == 4
    line = sentences.tier_line(s, batch)
    assert "100 % not served" in line and "unfinished at run end" in line


def test_raw_non_200_sentence_leaves_out_status_0(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS)
    _drop(b, 0)
    b.request(sent_ns=S, cancelled=True, done_ns=2 * S, **NO_RESPONSE, **BATCH)
    s = audit_run(b.close())
    line = sentences.tier_line(s, _tier(s, "batch"))
    assert "1 × 429" in line and "× 0" not in line


def test_share_429_leaves_out_breaker_refusals(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS)
    for i in range(2):
        _drop(b, i * S)
    for i in range(6):
        b.request(sent_ns=3 * S + i * S, reason="breaker_open", error="circuit breaker open on route primary",
                  done_ns=3 * S + i * S, **NO_RESPONSE, **BATCH)
    s = audit_run(b.close())
    batch = _tier(s, "batch")
    assert (batch.share_429.k, batch.share_429.n) == (2, 2)
    assert (batch.share_503.k, batch.share_503.n) == (0, 2)
    assert next(v for v in s.verdicts if v.check == "max_429_share").passed is False


def test_drop_is_kept_when_the_retry_was_not_sent_or_cancelled(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS)
    for i in range(4):
        b.request(sent_ns=i * S, **BATCH)
    for i in range(4):
        _drop(b, 10 * S + i * S, logical_id=f"L{i}")
        retry: dict[str, Any] = ({"not_sent": True, "reason": "budget", "done_ns": None} if i % 2 == 0
                                 else {"cancelled": True, "done_ns": 12 * S + i * S})
        b.request(logical_id=f"L{i}", attempt=2, retry_reason="429 rejected-saturated", intended_ns=11 * S + i * S,
                  sent_ns=11 * S + i * S, **retry, **{k: v for k, v in NO_RESPONSE.items()}, **BATCH)
    # every attempt unjudged: the last one still decides
    b.request(sent_ns=30 * S, cancelled=True, done_ns=31 * S, logical_id="C", **NO_RESPONSE, **BATCH)
    b.request(sent_ns=31 * S, attempt=2, not_sent=True, reason="budget", done_ns=None, logical_id="C",
              **NO_RESPONSE, **BATCH)
    s = audit_run(b.close())
    batch = _tier(s, "batch")
    assert batch.by_class["queue_full"] == 4
    assert batch.by_class["not_sent"] == 1 and batch.by_class["cancelled"] == 0
    assert (batch.drop_rate.k, batch.drop_rate.n) == (4, 8)
    assert "batch" not in sentences.never_dropped(s)


def test_starvation_counts_instant_rejections(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS, duration_s=80)
    b.request(sent_ns=0, **BATCH)
    for i in range(60):
        _drop(b, 5 * S + i * S)
    b.request(sent_ns=70 * S, **BATCH)
    for i in range(70):
        b.request(sent_ns=i * S + S // 3, **INTER)
    s = audit_run(b.close())
    gap = _tier(s, "batch").starvation_max_gap_s
    assert gap is not None and 64 < gap < 66  # refused from 5 s, next first token at 70.1 s
    assert any(f.kind == "starvation" and f.tier == "batch" for f in s.findings)
    assert (_tier(s, "interactive").starvation_max_gap_s or 0) < 1


def test_floor_membership_by_first_intended_send(tmp_path: Path) -> None:
    tiers = [TIERS[0], {"name": "batch", "priority": -1, "slo": {"floor_share": 0.3}}]
    b = RunBuilder(tmp_path, tiers=tiers)
    for i in range(3):  # slow idle probes: nothing reads as inflated
        b.request(tier="interactive", persona="calibration", sent_ns=-10 * S + i * S, first_token_ns=-5 * S + i * S)
    for i in range(10):
        b.request(sent_ns=10 * S + i * S // 4, **INTER)
    for i in range(3):  # drops make 10..13 s a window
        _drop(b, 10 * S + i * S, INTER)
    for i in range(10):  # batch arrives inside the window, first token at 16 s (after it)
        b.request(sent_ns=10 * S + i * S // 4, first_token_ns=16 * S + i * MS, last_token_ns=17 * S,
                  done_ns=17 * S, **BATCH)
    s = audit_run(b.close())
    assert [(w.start_s, w.end_s) for w in s.windows] == [(10.0, 13.0)]
    batch = _tier(s, "batch")
    assert batch.saturation is not None and batch.saturation.by_class["served"] == 10
    assert batch.floor.rate is not None and (batch.floor.rate.k, batch.floor.rate.n) == (10, 20)
    assert batch.floor.passed is True


def test_metrics_aligned_on_a_recently_booted_machine(tmp_path: Path) -> None:
    small = Anchor(mono_ns=20 * S, wall_ns=1_780_000_000 * S)
    b = RunBuilder(tmp_path, tiers=TIERS, duration_s=60)
    b.writer("p1", anchor=small)
    for i in range(60):
        b.request(sent_ns=i * S, **INTER)
    b.metrics([(sec * S, [("llm_d_epp_flow_control_queue_size", {"priority": "100"},
                           3.0 if 30 <= sec < 40 else 0.0)]) for sec in range(61)])
    # run.json carries the small anchor too
    manifest = json.loads((b.dir / "run.json").read_text())
    manifest["mono_anchor_ns"] = small.mono_ns
    (b.dir / "run.json").write_text(json.dumps(manifest))
    s = audit_run(b.close())
    assert [(w.start_s, w.end_s, w.source) for w in s.windows] == [(30.0, 40.0, "metrics")]


def test_rebase_shapes() -> None:
    anchor = 5_000 * S
    rel = np.arange(0, 61, dtype=np.float64) * S
    assert np.array_equal(_rebase(rel, anchor, None, 60 * S), rel)
    assert np.array_equal(_rebase(rel + anchor, anchor, None, 60 * S), rel)
    assert np.array_equal(_rebase(rel + anchor, anchor, None), rel)
    small = 20 * S  # booted 20 s before the run: relative values are kept (the scraper's shape)
    assert np.array_equal(_rebase(rel, small, None, 60 * S), rel)
    marked = np.full(len(rel), "monotonic", dtype=object)  # a line's clock marker decides
    assert np.array_equal(_rebase(rel + small, small, None, 60 * S, clocks=marked), rel)
