"""The live exporter's bookkeeping (audit/live.py), record by record, read back from its own registry."""

from __future__ import annotations

from rushhour.audit.live import LiveMetrics
from rushhour.scenarios import load_scenario


def _value(live: LiveMetrics, name: str, **labels: str) -> float | None:
    return live.registry.get_sample_value(name, labels)


def test_each_record_lands_where_the_audit_would_put_it() -> None:
    live = LiveMetrics(load_scenario("demo"))
    ok = {"kind": "request", "tier": "interactive", "status": 200, "complete": True, "sent_ns": 0,
          "first_token_ns": 400_000_000, "done_ns": 900_000_000}
    full = {"kind": "request", "tier": "batch", "status": 429, "reason": "rejected-saturated", "sent_ns": 0,
            "done_ns": 1_000_000}
    for record in (ok, ok, full, {**ok, "control": True, "twin_of": "x"}, {"kind": "request", "tier": "batch",
                                                                            "not_sent": True}):
        live.feed(record, "shard-0")
    live.feed({"kind": "health", "in_flight": 7, "loop_lag_ns": 2_000_000, "not_sent_total": 3, "worker_index": 0},
              "shard-0")
    live.feed({"kind": "breaker", "state": "open"}, "shard-0")  # not watched
    assert _value(live, "rushhour_attempts_total", tier="interactive", **{"class": "served"}) == 2
    assert _value(live, "rushhour_attempts_total", tier="batch", **{"class": "queue_full"}) == 1
    assert _value(live, "rushhour_control_attempts_total") == 1  # twins count in no tier figure
    assert _value(live, "rushhour_not_sent_total", tier="batch") == 1
    assert _value(live, "rushhour_ttft_seconds_count", tier="interactive") == 2
    assert _value(live, "rushhour_ttft_seconds_sum", tier="interactive") == 0.8
    assert _value(live, "rushhour_in_flight", process="shard-0:0") == 7
    assert _value(live, "rushhour_loop_lag_seconds", process="shard-0:0") == 0.002
