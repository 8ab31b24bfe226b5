"""The priority control against a real vLLM 0.32: an effect with priority scheduling, none with fcfs.

Every request of a saturating two-tier run gets an equal-priority twin (tests/real/scenarios/
vllm-priority-control.yaml, ≤ 25 s). With ``--scheduling-policy priority`` the interactive tier's TTFT
must be significantly lower than its twins'; with vLLM's default policy (fcfs) priority is ignored, so
the same comparison must find nothing (p > 0.01: a stricter bar than the 0.05 the first run must pass,
so a chance finding of the null run flakes at most 1 % of the time).

vLLM's own per-request timing (engines/serve.py starts it with --enable-per-request-metrics) must tell the same
story as the twins: under priority the interactive tier's typical wait in vLLM's queue is below the batch tier's;
under fcfs the two tiers, sent the same load, wait alike there.
"""

from __future__ import annotations

import json

from .helpers import SCENARIOS, run_rushhour, tiers

SCENARIO = SCENARIOS / "vllm-priority-control.yaml"


def _effects(summary: dict[str, object]) -> dict[str, dict[str, object]]:
    effects = {name: t["priority_effect"] for name, t in tiers(summary).items()}
    print(json.dumps({name: e and e["message"] for name, e in effects.items()}, indent=1))  # type: ignore[index]
    print(json.dumps(effects, indent=1))
    assert all(effects.values()), effects
    return effects  # type: ignore[return-value]


def _engine_queue_p50(summary: dict[str, object]) -> dict[str, float]:
    """Each tier's p50 wait in vLLM's queue, from the audit's wait split (vLLM's per-request metrics)."""
    found = {w["tier"]: next(p["p50_ms"] for p in w["parts"] if p["part"] == "engine_queue")
             for w in summary["waits"]}  # type: ignore[union-attr]
    print("engine queue p50 ms:", found)
    assert set(found) == {"interactive", "batch"} and all(v is not None for v in found.values()), found
    return found  # type: ignore[return-value]


def test_priority_scheduling_shows_against_the_control(vllm_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    summary = run_rushhour(SCENARIO, vllm_server.url, tmp_path / "runs")
    effects = _effects(summary)
    ttft = effects["interactive"]["ttft"]
    assert ttft["n"] >= 20, ttft  # type: ignore[index]
    assert ttft["significant"] and ttft["change"] < 0, ttft  # type: ignore[index, operator]
    assert effects["interactive"]["effect"]
    # twins count in no tier figure: each tier's requests are its own (as many twins as sampled requests)
    for name, effect in effects.items():
        assert tiers(summary)[name]["requests"] >= effect["pairs"]
    queue = _engine_queue_p50(summary)  # the servers' own timing agrees with the twins
    assert queue["interactive"] < queue["batch"], queue


def test_fcfs_shows_no_effect_against_the_control(fcfs_vllm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    summary = run_rushhour(SCENARIO, fcfs_vllm.url, tmp_path / "runs")
    effects = _effects(summary)
    ttft = effects["interactive"]["ttft"]
    assert ttft["n"] >= 20, ttft  # type: ignore[index]
    # TTFT only: at the run's end a twin still in flight is cut while its agent's request had finished,
    # so "not served" may differ under fcfs too; that is the run's edge, not priority
    assert ttft["p_value"] > 0.01, ttft  # type: ignore[index, operator]
    queue = _engine_queue_p50(summary)
    assert max(queue.values()) < 3 * min(queue.values()), queue  # the same load waits alike when priority is ignored
