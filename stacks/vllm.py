"""vLLM with ``--scheduling-policy priority``: body ``priority`` (lower = earlier), admission limits → 503."""

from __future__ import annotations

from rushhour.stacks.common import CANCEL_DEFAULTS, COMMON_RULES
from rushhour.stacks.profile import CounterCheck, Metrics, Rule, StackProfile, Wire

TOOLS_REFUSED = "server refuses tools: start vLLM with --enable-auto-tool-choice --tool-call-parser <parser>"

# vLLM 0.32.0 (vllm/exceptions.py, v1/engine/async_llm.py ``_check_admission``): both admission limits
# answer HTTP 503, type "Service Unavailable", code 503; streamed requests may get the same error object
# inside a 200 stream (``data: {"error": …}``), so these rules do not look at the status.
RULES: tuple[Rule, ...] = (
    Rule("queue_full", r"engine is currently busy and cannot accept new requests",
         note="vLLM ≥ 0.30 QueueOverflowError: --max-num-queued-reqs reached (vllm/exceptions.py); "
              "counted in vllm:admission_rejections_total{reason=max_num_queued_reqs}; 503 or in-band"),
    Rule("queue_full", r"reached its prefill token backlog limit",
         note="vLLM ≥ 0.30 MaxQueuedTokensError: --max-num-queued-tokens reached (vllm/exceptions.py); "
              "counted in vllm:admission_rejections_total{reason=max_num_queued_tokens}; 503 or in-band"),
    Rule("queue_full", r"queueoverflow|queue overflow|queue is full|max[-_ ]num[-_ ]queued|too many queued",
         statuses=(503, 429), note="AsyncLLM queue overflow, wording of PR #49445 before release"),
    Rule("overloaded", r"model is currently scaling",
         note="vLLM elastic expert parallel: 503 while scaling (entrypoints/serve/elastic_ep/middleware.py)"),
    Rule("failed", r"request failed; please retry",
         note="vLLM RetryableRequestError: 503 for a request-level internal error (e.g. KV load failure)"),
    Rule("overloaded", r"server is overloaded or not ready", note="llm-d-inference-sim style 503"),
    # a client/configuration error, not load: never served, but named once instead of a wall of `failed`
    Rule("failed", r"tool choice requires --enable-auto-tool-choice|requires --tool-call-parser to be set",
         note="vLLM 0.32 renderers/online_renderer.py: a request offering tools (tool_choice auto by default) "
              "to a server started without a tool-call parser, 400 BadRequestError",
         finding=TOOLS_REFUSED),
)

# vllm/v1/metrics/loggers.py: no priority label, so the checks are totals.
SUCCESS = "vllm:request_success_total"
ADMISSION_REJECTIONS = "vllm:admission_rejections_total"
METRICS = Metrics(
    prefixes=("vllm:",),
    checks=(
        CounterCheck("served", SUCCESS, exclude={"finished_reason": ("abort", "error")},
                     note="finished requests except aborted and failed ones (FinishReason)"),
        CounterCheck("queue_full", ADMISSION_REJECTIONS,
                     note="admission rejections, every reason (max_num_queued_reqs, max_num_queued_tokens)"),
        # per reason, by the text each limit answers with (503 or in-band): which limit turned them away
        CounterCheck("match:engine is currently busy", ADMISSION_REJECTIONS,
                     select={"reason": ("max_num_queued_reqs",)}, note="--max-num-queued-reqs (QueueOverflowError)"),
        CounterCheck("match:prefill token backlog", ADMISSION_REJECTIONS,
                     select={"reason": ("max_num_queued_tokens",)},
                     note="--max-num-queued-tokens (MaxQueuedTokensError)"),
    ),
)

PROFILE = StackProfile(
    name="vllm",
    summary="vLLM OpenAI server, priority scheduling (body priority, lower = earlier)",
    wire=Wire(priority_body="negated", pin_output=True),
    rules=(*RULES, *COMMON_RULES),
    status_defaults=dict(CANCEL_DEFAULTS),
    metrics=METRICS,
    testbed="vllm",
)
