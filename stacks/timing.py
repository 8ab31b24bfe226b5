"""Server timing: the per-request waits a stack reports itself, read as raw facts into the record (pure).

vLLM 0.32 (``--enable-per-request-metrics``) adds a ``metrics`` object to an answer — in a stream, to the
final usage chunk — built by ``build_per_request_timing_metrics`` (vllm/entrypoints/generate/base/serving.py):
``queue_time_ms`` = scheduled − queued (the engine's waiting queue), ``time_to_first_token_ms`` = first
token − scheduled (prefill: the queue is *not* in it), ``generation_time_ms``, ``mean_itl_ms``,
``tokens_per_second``. LiteLLM 1.106.12 sets ``x-litellm-*-ms`` headers on every answer
(proxy/common_request_processing.py). llm-d reports its flow-control queue only as a histogram per band;
the testbed's llm-d profile also returns each request's gateway queue in ``x-testbed-gateway-queue-ms``.

Every value is bounded: a finite, non-negative number of at most ``MAX_MS`` (a day) from at most
``MAX_TEXT`` characters; anything else from a (hostile) server is left out, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

MAX_MS = 86_400_000.0  # a day: a wait longer than any run is a lying server, not a fact
MAX_TEXT = 32  # a header's number is never longer

# the body's ``metrics`` object (vLLM PerRequestMetrics) → record field
BODY_METRICS: dict[str, str] = {
    "queue_time_ms": "metrics_queue_time_ms",
    "time_to_first_token_ms": "metrics_time_to_first_token_ms",
    "generation_time_ms": "metrics_generation_time_ms",
    "mean_itl_ms": "metrics_mean_itl_ms",
    "tokens_per_second": "metrics_tokens_per_second",
}
GATEWAY_QUEUE_HEADER = "x-testbed-gateway-queue-ms"
# response headers (lower case) → record field
HEADERS: dict[str, str] = {
    "x-litellm-response-duration-ms": "litellm_response_duration_ms",
    "x-litellm-overhead-duration-ms": "litellm_overhead_duration_ms",
    "x-litellm-timing-llm-api-ms": "litellm_timing_llm_api_ms",
    "x-litellm-timing-pre-processing-ms": "litellm_timing_pre_processing_ms",
    GATEWAY_QUEUE_HEADER: "gateway_queue_ms",
}
FIELDS: tuple[str, ...] = (*BODY_METRICS.values(), *HEADERS.values())


def bounded(value: object) -> float | None:
    """A reported number kept as a float, or None when it is not a finite number in [0, MAX_MS]."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            return None
        try:
            value = float(value.strip())
        except ValueError:
            return None
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > MAX_MS:
        return None
    return number


def from_metrics(obj: object) -> dict[str, float]:
    """Record fields from an answer's ``metrics`` object (unknown keys and bad values left out)."""
    if not isinstance(obj, Mapping):
        return {}
    facts: dict[str, float] = {}
    for key, field_name in BODY_METRICS.items():
        value = obj.get(key)
        number = None if isinstance(value, str) else bounded(value)  # a JSON number, never text
        if number is not None:
            facts[field_name] = number
    return facts


def from_headers(headers: Mapping[str, str]) -> dict[str, float]:
    """Record fields from an answer's timing headers (names in lower case, as the wire keeps them)."""
    facts: dict[str, float] = {}
    for name, field_name in HEADERS.items():
        value = headers.get(name)
        if value is not None:
            number = bounded(value)
            if number is not None:
                facts[field_name] = number
    return facts

# vLLM's histograms of the same intervals (vllm/v1/metrics/stats.py ``update_from_finished_request``: queued →
# scheduled, scheduled → first token), with the record field each one totals: the audit's timing cross-check
HISTOGRAMS: tuple[tuple[str, str], ...] = (
    ("vllm:request_queue_time_seconds", "metrics_queue_time_ms"),
    ("vllm:request_prefill_time_seconds", "metrics_time_to_first_token_ms"),
)

# what a user of each stack does to get per-request timing (``rushhour doctor`` says it when none came back)
VLLM_FLAG = "--enable-per-request-metrics"
TURN_ON: dict[str, str] = {
    "vllm": f"start vLLM (0.32 or later) with {VLLM_FLAG} (and without --disable-log-stats)",
    "llm-d": f"start its vLLM model servers with {VLLM_FLAG}",
    "gaie-v1": f"start its vLLM model servers with {VLLM_FLAG}",
    "litellm": f"LiteLLM sends its x-litellm-*-ms headers by default; start the vLLM behind it with {VLLM_FLAG}",
}
