"""LiteLLM proxy: a gateway with per-key tiers; capacity 429s kept apart from quota 429s.

Texts read in LiteLLM 1.106.12 (the pinned engine, engines/releases.toml) and 1.110.2, identical in both:
litellm/types/router.py ``RouterErrors``, router_utils/client_initalization_utils.py,
proxy/hooks/parallel_request_limiter.py and parallel_request_limiter_v3.py, ``CommonProxyErrors``.
Errors are OpenAI-shaped: ``{"error": {"message", "type", "param", "code": "429"}}``; messages of the router carry a
``litellm.RateLimitError: `` prefix. An engine's own error passes through inside LiteLLM's message
(e.g. ``litellm.ServiceUnavailableError: … - The engine is currently busy …``), so the engines' rules
follow LiteLLM's own.
"""

from __future__ import annotations

from collections.abc import Mapping

from rushhour.stacks.common import CANCEL_DEFAULTS, COMMON_RULES
from rushhour.stacks.profile import CounterCheck, Metrics, Rule, StackProfile, Wire
from rushhour.stacks.sglang import RULES as SGLANG_RULES
from rushhour.stacks.vllm import RULES as VLLM_RULES

RULES: tuple[Rule, ...] = (
    # capacity: the deployments behind the proxy are full or gone, whoever is asking
    Rule("queue_full", r"deployment has all max_parallel_requests slots in use",
         note="router: every slot of the deployment busy (RouterErrors.max_parallel_requests_exceeded), 429"),
    Rule("queue_full", r"max parallel request limit reached\.? hit global limit",
         note="proxy-wide global_max_parallel_requests reached (parallel_request_limiter.py), 429"),
    Rule("overloaded", r"all deployments for selected model are in cooldown|no deployments available"
                       r"|there are no healthy deployments for this model|no healthy deployment available",
         note="router: no deployment can serve (cooldown after failures, none healthy), 429 (RouterErrors)"),
    # quota: a limit of this key / user / team / end user (its tier), not of the stack
    Rule("rate_limited", r"crossed tpm / rpm / max parallel request limit"
                         r"|litellm rate limit handler for rate limit type",
         note="per key/user/team/customer rpm, tpm or max_parallel_requests (parallel_request_limiter.py), 429"),
    Rule("rate_limited", r"rate limit exceeded for \w+",
         note="v3 limiter: 'Rate limit exceeded for api_key|user|team|end_user|model_per_key…: … Limit type: "
              "requests|tokens|max_parallel_requests' (parallel_request_limiter_v3.py), 429"),
    Rule("rate_limited", r"deployment over user-defined ratelimit|model rate limit exceeded\. (rpm|tpm)",
         note="deployment rpm/tpm cap configured in the proxy (router pre-call checks), 429"),
    Rule("rate_limited", r"rate_limit_type=", statuses=(429,),
         note="429 with LiteLLM's rate_limit_type header (v3 limiter) and no text above"),
    Rule("failed", r"rate limit enforcement unavailable",
         note="503: rate-limit counters unreachable with fail_closed_rate_limit_enforcement (a proxy fault)"),
    Rule("failed", statuses=(401, 403), note="authentication / key not allowed (auth_error)"),
    Rule("queue_timeout", r"request timed out while polling queue",
         note="router Scheduler (scheduler.py wait_for_turn): a request with a body priority waited in LiteLLM's "
              "priority queue, every deployment cooling down, until the router timeout; 408 litellm.Timeout "
              "(from the source, not observed)"),
)

# ``x-ratelimit-<scope>-remaining-<kind>`` (v3 limiter) / ``x-ratelimit-remaining-requests`` (v1):
# on a 429 the exhausted ones say which limit was hit.
_REASON_PREFIX = "x-ratelimit-"


def read_reason(headers: Mapping[str, str], status: int) -> str | None:
    """On LiteLLM's 429: its ``rate_limit_type`` header and every exhausted ``x-ratelimit-*-remaining-*``.

    Only a LiteLLM answer (an ``x-litellm-*`` header or ``rate_limit_type``): OpenAI's own 429s carry
    ``x-ratelimit-*`` too, and there the body's error code (``insufficient_quota``, …) is the reason.
    """
    if status != 429:
        return None
    names = {name.lower() for name in headers}
    if "rate_limit_type" not in names and not any(name.startswith("x-litellm-") for name in names):
        return None
    parts: list[str] = []
    kind = headers.get("rate_limit_type")
    if kind:
        parts.append(f"rate_limit_type={kind}")
    for name, value in sorted(headers.items()):
        lower = name.lower()
        if lower.startswith(_REASON_PREFIX) and "-remaining-" in f"-{lower[len(_REASON_PREFIX):]}" \
                and str(value).strip() in ("0", "0.0"):
            parts.append(f"{lower}=0")
    return " ".join(parts) or None


# litellm/types/integrations/prometheus.py: per-key labels (api_key_alias, team, …) and status codes.
TOTAL = "litellm_proxy_total_requests_metric_total"
FAILED = "litellm_proxy_failed_requests_metric_total"
# the scraper's own requests (with a tier's key as its credential) are not the load's
_SCRAPES = {"route": ("/metrics", "/metrics/")}
METRICS = Metrics(
    # a real proxy exports hundreds of series (one per key, user agent, client IP …): keep what is read
    names=(TOTAL, FAILED, "litellm_deployment_state", "litellm_deployment_cooled_down_total",
           "litellm_deployment_success_responses_total", "litellm_deployment_failure_responses_total"),
    checks=(
        CounterCheck("served", TOTAL, select={"status_code": ("200",)}, exclude=_SCRAPES, by="api_key_alias",
                     note="proxy requests answered 200, per key alias where the alias is the tier name"),
        CounterCheck("status:429", FAILED, select={"exception_status": ("429",)}, exclude=_SCRAPES,
                     by="api_key_alias",
                     note="proxy 429s (capacity and quota), per key alias where the alias is the tier name"),
        # 1.106.12 labels the router's 429s RateLimitError and the proxy limiter's HTTPException
        CounterCheck("queue_full+overloaded", FAILED,
                     select={"exception_status": ("429",), "exception_class": ("RateLimitError",)},
                     exclude=_SCRAPES, by="api_key_alias",
                     note="capacity 429s: deployment slots in use, no deployment available (router)"),
        CounterCheck("rate_limited", FAILED,
                     select={"exception_status": ("429",), "exception_class": ("HTTPException",)},
                     exclude=_SCRAPES, by="api_key_alias",
                     note="quota 429s: a key's / user's / team's limits (proxy rate limiter)"),
    ),
)

PROFILE = StackProfile(
    name="litellm",
    summary="LiteLLM proxy (tiers by per-tier API key; priority in body and extra_body; capacity 429s apart "
            "from quota 429s)",
    # LiteLLM 1.106.12 router.py ``acompletion``: a body ``priority`` (an int; ``kwargs.get("priority") or
    # default_priority``, so 0 means none) sends the request through its Scheduler (scheduler.py: a heap,
    # lower = earlier), which holds it only while every deployment is cooling down; the field is consumed
    # there and never reaches the upstream. ``extra_body`` is passed on into the upstream's JSON body, so
    # ``extra_body.priority`` is what a vLLM behind the proxy schedules by (lower = earlier; observed,
    # tests/real/test_gateway_real.py). For an SGLang upstream (higher = earlier) set the tier's
    # ``body: {extra_body: {priority: …}}`` by hand: a tier's own body wins.
    wire=Wire(priority_body="negated", priority_extra_body="negated"),
    rules=(*RULES, *VLLM_RULES, *SGLANG_RULES, *COMMON_RULES),
    status_defaults=dict(CANCEL_DEFAULTS),
    reason_headers=("rate_limit_type",),
    read_reason=read_reason,
    metrics=METRICS,
    testbed="litellm",  # the testbed's LiteLLM: vLLM behind a proxy's extra_body priority and timing headers
)
