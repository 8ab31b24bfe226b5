"""The doctor's timing check: which per-request server timing the stack reports, and how to turn it on (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from rushhour.stacks.timing import BODY_METRICS, HEADERS, TURN_ON

# what each reported field lets the audit split, for the doctor's line
_ENGINE = ("metrics_queue_time_ms", "metrics_time_to_first_token_ms")
_GATEWAY = ("gateway_queue_ms", "litellm_overhead_duration_ms")


def timing_check(profile: str, served: list[Mapping[str, Any]]
                 ) -> tuple[Literal["pass", "warn", "info"], str] | None:
    """(status, detail) of the "server timing" line from the served probes' records; None with no served probe."""
    if not served:
        return None
    known = (*BODY_METRICS.values(), *HEADERS.values())
    seen = {name for rec in served for name in known if rec.get(name) is not None}
    parts = []
    if seen & set(_GATEWAY):
        parts.append("gateway queue")
    if seen & set(_ENGINE):
        parts.append("engine queue and prefill (vLLM's per-request metrics)")
    hint = TURN_ON.get(profile)
    if not parts:
        if hint:
            return "warn", (f"no per-request timing came back, so reports cannot say where each tier waited: "
                            f"{hint}")
        return "info", "the stack reports no per-request timing: reports show the client's wait only"
    detail = "the stack reports " + " and ".join(parts) + ": reports say where each tier waited"
    if not seen & set(_ENGINE) and hint:
        detail += f" (for the engine's queue: {hint})"
        if profile == "litellm" and any(rec.get("stream", True) for rec in served):
            detail += ("; LiteLLM passes vLLM's metrics on whole answers only (it re-chunks a stream without them): "
                       "a persona with `stream: false` gets the engine's part")
    return "pass", detail
