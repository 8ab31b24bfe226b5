"""Where each tier waited, on a real vLLM 0.32 with per-request metrics: the split, and vLLM's own totals.

The session's priority vLLM (engines/serve.py starts it with --enable-per-request-metrics) is saturated by
two tiers. Every served attempt carries vLLM's ``metrics`` object; the run's queue times summed equal the
delta of ``vllm:request_queue_time_seconds_sum`` within 1 % with equal counts (the test's own scrapes and
the audit's timing check), and priority scheduling shows: the low tier's engine-queue share is larger.
"""

from __future__ import annotations

import json

from .helpers import SCENARIOS, run_rushhour, scrape, settle, total

QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"


def test_vllm_per_request_metrics_split_each_tier(vllm_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = vllm_server.url + "/metrics"

    def idle(samples: list[tuple[str, dict[str, str], float]]) -> bool:
        return total(samples, "vllm:num_requests_running") + total(samples, "vllm:num_requests_waiting") == 0

    before = settle(lambda: scrape(url, server=vllm_server), idle)
    summary = run_rushhour(SCENARIOS / "vllm-waits.yaml", vllm_server.url, tmp_path / "runs")
    after = settle(lambda: scrape(url, server=vllm_server), idle)

    def delta(name: str) -> float:
        return total(after, name) - total(before, name)

    rows = []
    for shard in (tmp_path / "runs").glob("*/records/*.jsonl"):
        rows += [r for r in map(json.loads, shard.read_text().splitlines()) if r.get("kind") == "request"]
    queue_ms = [r["metrics_queue_time_ms"] for r in rows if r.get("metrics_queue_time_ms") is not None]
    prefill_ms = [r["metrics_time_to_first_token_ms"] for r in rows
                  if r.get("metrics_time_to_first_token_ms") is not None]
    waits = {w["tier"]: {p["part"]: p for p in w["parts"]} for w in summary["waits"]}  # type: ignore[union-attr]
    figures = {"client_queue_s": sum(queue_ms) / 1000, "server_queue_s": delta(QUEUE + "_sum"),
               "client_n": len(queue_ms), "server_n": delta(QUEUE + "_count"),
               "client_prefill_s": sum(prefill_ms) / 1000, "server_prefill_s": delta(PREFILL + "_sum"),
               "timing_checks": summary["timing_checks"], "waits": summary["waits"]}
    print(json.dumps(figures, indent=1))

    assert len(queue_ms) > 20, "too few served requests reported vLLM's metrics"
    assert len(queue_ms) == round(figures["server_n"]), figures
    assert abs(figures["client_queue_s"] - figures["server_queue_s"]) <= 0.01 * figures["server_queue_s"], figures
    assert abs(figures["client_prefill_s"] - figures["server_prefill_s"]) <= 0.01 * figures["server_prefill_s"]
    checks = summary["timing_checks"]
    assert checks and all(c["matches"] for c in checks), checks  # type: ignore[union-attr]
    for tier in ("interactive", "batch"):
        assert waits[tier]["engine_queue"]["reported"] > 0 and waits[tier]["gateway"]["reported"] == 0
    assert waits["batch"]["engine_queue"]["share"] > waits["interactive"]["engine_queue"]["share"], figures
    # priority scheduling, visibly: the low tier's typical wait in vLLM's queue is several times the high one's
    assert waits["batch"]["engine_queue"]["p50_ms"] > 3 * waits["interactive"]["engine_queue"]["p50_ms"], figures
