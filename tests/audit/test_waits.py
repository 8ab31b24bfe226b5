"""The wait split (audit/waits.py) and the timing cross-check (audit/timing_check.py), on hand-made rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from rushhour.audit.metrics import ServerMetrics
from rushhour.audit.timing_check import check_timing
from rushhour.audit.waits import sentence, tier_waits, wait_splits

MS = 1_000_000


def _row(tier: str, total: float, client: float, queue: float | None, prefill: float | None,
         gateway: float | None = None, served: bool = True) -> dict:
    return {"tier": tier, "served": served, "control": False, "intended_ns": 0, "sent_ns": int(client * MS),
            "first_token_ns": int(total * MS) if served else None, "metrics_queue_time_ms": queue,
            "metrics_time_to_first_token_ms": prefill, "gateway_queue_ms": gateway}


def test_parts_add_up_and_unreported_is_not_zero() -> None:
    frame = pd.DataFrame([_row("batch", 4100, 5, 3600, 400), _row("batch", 1000, 5, None, None),
                          _row("batch", 0, 0, None, None, served=False)])
    waits = tier_waits("batch", frame)
    parts = {p.part: p for p in waits.parts}
    assert waits.served == 2
    assert parts["engine_queue"].reported == 1 and parts["engine_queue"].not_reported == 1
    assert parts["engine_queue"].p50_ms == pytest.approx(3600)
    assert parts["rest"].p50_ms == pytest.approx(95)  # 4100 − 5 − 3600 − 400
    assert parts["gateway"].reported == 0 and parts["gateway"].p50_ms is None
    # shares over the attempts that reported the part: queue + prefill + rest + client of that one = 1
    shares = [parts[k].share for k in ("engine_queue", "prefill", "rest")]
    assert all(x is not None for x in shares)
    assert sum(x for x in shares if x is not None) == pytest.approx(4095 / 4100)
    assert "3.60 s of it in the engine's queue" in sentence(waits)


def test_gateway_part_and_tiers() -> None:
    frame = pd.DataFrame([_row("interactive", 300, 2, 0.5, 250), _row("batch", 5000, 2, 10, 250, gateway=4500)])
    waits = {w.tier: w for w in wait_splits(frame, ["interactive", "batch"])}
    batch = {p.part: p for p in waits["batch"].parts}
    assert batch["gateway"].share == pytest.approx(0.9)
    assert "in the gateway's queue" in sentence(waits["batch"])


def test_a_whole_answer_splits_its_decode_too() -> None:
    """Not streamed, the client's first byte comes after the last token: vLLM's generation time is a part of the
    wait there (LiteLLM passes vLLM's metrics only on whole answers); a stream's decode is after its first token."""
    whole = {**_row("batch", 3000, 5, 1000, 200, gateway=30), "stream": False, "metrics_generation_time_ms": 1700}
    streamed = {**_row("batch", 1300, 5, 1000, 200), "stream": True, "metrics_generation_time_ms": 1700}
    parts = {p.part: p for p in tier_waits("batch", pd.DataFrame([whole])).parts}
    assert parts["decode"].p50_ms == pytest.approx(1700) and parts["rest"].p50_ms == pytest.approx(65)
    assert sum(p.share for p in parts.values() if p.share is not None) == pytest.approx(1.0)
    parts = {p.part: p for p in tier_waits("batch", pd.DataFrame([streamed])).parts}
    assert parts["decode"].reported == 0 and parts["rest"].p50_ms == pytest.approx(95)


def test_per_phase_splits_each_phase_on_its_own_attempts() -> None:
    from rushhour.audit.waits import phase_splits

    frame = pd.DataFrame([_row("batch", 4100, 5, 3600, 400), _row("batch", 300, 5, 50, 200),
                          _row("interactive", 250, 2, 10, 200)])
    index = np.array([0, 1, 1])
    found = phase_splits(frame, ["interactive", "batch"], ["calm", "peak"], index)
    assert [(w.phase, w.tier, w.served) for w in found] == [("calm", "batch", 1), ("peak", "interactive", 1),
                                                               ("peak", "batch", 1)]
    calm = {p.part: p for p in found[0].parts}
    assert calm["engine_queue"].p50_ms == pytest.approx(3600)
    assert phase_splits(frame, ["batch"], ["only"], np.zeros(3, dtype=int)) == []  # one phase: the run's split


def test_no_server_timing_means_no_split() -> None:
    frame = pd.DataFrame([_row("a", 100, 1, None, None)])
    assert wait_splits(frame, ["a"]) == []


def _metrics(queue_sum: float, queue_count: float) -> ServerMetrics:
    rows = []
    for ts, factor in ((0, 0.0), (10 * 10**9, 1.0)):
        for name, value in (("vllm:request_queue_time_seconds_sum", 5.0 + queue_sum * factor),
                            ("vllm:request_queue_time_seconds_count", 7.0 + queue_count * factor)):
            rows.append({"ts_ns": ts, "name": name, "labels": json.dumps({"model_name": "m"}), "value": value})
    return ServerMetrics(samples=pd.DataFrame(rows), scrapes=2, scrape_ts_ns=np.array([0, 10 * 10**9]))


def test_timing_check_matches_and_names_a_mismatch() -> None:
    frame = pd.DataFrame({"metrics_queue_time_ms": [1000.0, 500.0, None], "status": [200, 200, 429]})
    checks, findings = check_timing(frame, _metrics(1.5, 2))
    assert [c.matches for c in checks] == [True] and not findings
    assert checks[0].server_sum_s == pytest.approx(1.5) and checks[0].client_count == 2
    checks, findings = check_timing(frame, _metrics(1.6, 2))  # 6.7 % off
    assert [c.matches for c in checks] == [False]
    assert findings[0].kind == "timing_mismatch" and findings[0].severity == "error"
    _, findings = check_timing(frame, _metrics(1.5, 3))  # a request the client never saw timed
    assert findings and "differs" in findings[0].message


def test_timing_check_allows_the_requests_that_were_cut_but_not_more() -> None:
    frame = pd.DataFrame({"metrics_queue_time_ms": [1000.0, 500.0, None], "status": [200, 200, 200]})
    checks, findings = check_timing(frame, _metrics(2.5, 3))  # the cut one waited 1 s in the queue
    assert checks[0].matches and checks[0].unreported == 1 and not findings
    _, findings = check_timing(frame, _metrics(2.5, 4))  # two more than the one that could be
    assert findings
    _, findings = check_timing(frame, _metrics(1.2, 3))  # the client's sum above the server's
    assert findings


def test_timing_check_allows_requests_revoked_while_running() -> None:
    """llm-d's revocation answers a running request 429 evicted (class preempted): vLLM timed its queue, the
    answer carried no timing; a 429 of another class was never scheduled."""
    frame = pd.DataFrame({"metrics_queue_time_ms": [1000.0, 500.0, None], "status": [200, 200, 429],
                          "cls": ["served", "served", "preempted"]})
    checks, findings = check_timing(frame, _metrics(2.5, 3))
    assert checks[0].matches and checks[0].unreported == 1 and not findings
    frame["cls"] = ["served", "served", "queue_full"]
    _, findings = check_timing(frame, _metrics(2.5, 3))
    assert findings


def test_a_gateway_alone_leaves_the_rest_unexplained_not_zero() -> None:
    waits = tier_waits("a", pd.DataFrame([_row("a", 1000, 10, None, None, gateway=300)]))
    parts = {p.part: p for p in waits.parts}
    assert parts["engine_queue"].reported == 0 and parts["rest"].p50_ms == pytest.approx(690)
    assert sum(p.share or 0.0 for p in waits.parts) == pytest.approx(1.0)
    assert "69 % is not explained by what the stack reported" in sentence(waits)
