"""The doctor's "server timing" line: what the stack reports, and vLLM's server flag when nothing came back."""

from __future__ import annotations

from typing import Any

from rushhour.audit.doctor import DoctorInput, exit_code, judge

MS = 1_000_000


def rec(persona: str, tier: str, **extra: Any) -> dict[str, Any]:
    """A served probe record (a streamed answer with its end marker and usage)."""
    return {"persona": persona, "tier": tier, "status": 200, "complete": True, "error": None, "sent_ns": 0,
            "first_token_ns": 5 * MS, "tokens": 4, "prompt_tokens": 64, "output_tokens": 4, **extra}


def healthy(profile: str = "vllm") -> DoctorInput:
    return DoctorInput(profile=profile, target="http://127.0.0.1:1", tiers={"hi": 100, "lo": -1},
                       records=[rec("doctor-tier", "hi"), rec("doctor-tier", "lo")], model="tiny", models=["tiny"])


def status_of(checks: list, name: str) -> str:  # type: ignore[type-arg]
    return next(c.status for c in checks if c.name == name)


def _line(checks: list) -> str:  # type: ignore[type-arg]
    return next(c.detail for c in checks if c.name == "server timing")


def test_vllm_without_per_request_metrics_names_the_flag() -> None:
    checks = judge(healthy())
    assert status_of(checks, "server timing") == "warn"
    assert "--enable-per-request-metrics" in _line(checks)
    assert exit_code(checks) == 0  # poorer reports, not a wrong audit


def test_vllm_with_metrics_passes() -> None:
    inp = healthy()
    inp.records = [rec("doctor-tier", t, metrics_queue_time_ms=1.5, metrics_time_to_first_token_ms=4.0)
                   for t in ("hi", "lo")]
    checks = judge(inp)
    assert status_of(checks, "server timing") == "pass"
    assert "engine queue and prefill" in _line(checks)


def test_gateway_only_says_how_to_get_the_engine_part() -> None:
    inp = healthy(profile="litellm")
    inp.records = [rec("doctor-tier", t, litellm_overhead_duration_ms=3.0) for t in ("hi", "lo")]
    line = _line(judge(inp))
    assert line.startswith("the stack reports gateway queue") and "--enable-per-request-metrics" in line
    assert "whole answers only" in line  # LiteLLM 1.106.12 drops vLLM's metrics from a stream (test_gateway_real)
    inp.records = [rec("doctor-tier", t, litellm_overhead_duration_ms=3.0, stream=False) for t in ("hi", "lo")]
    assert "whole answers only" not in _line(judge(inp))


def test_a_stack_without_timing_is_info() -> None:
    assert status_of(judge(healthy(profile="openai")), "server timing") == "info"
