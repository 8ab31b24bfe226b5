"""OpenAI's API: ``service_tier`` in the body, quota 429s apart from capacity ones."""

from __future__ import annotations

from rushhour.stacks.common import CANCEL_DEFAULTS, COMMON_RULES
from rushhour.stacks.profile import Rule, StackProfile, Wire

# stacks.md §4.
RULES: tuple[Rule, ...] = (
    Rule("shed", r"resource_unavailable|resource unavailable", note="flex without capacity (unbilled 429)"),
    Rule("rate_limited", r"rate_limit_exceeded|rate limit reached|insufficient_quota|ratelimiterror",
         note="quota, not capacity"),
    Rule("overloaded", r"server_is_overloaded|service_unavailable_error|engine is currently overloaded",
         note="Responses API in-band overload, 503 overload"),
)

PROFILE = StackProfile(
    name="openai",
    summary="OpenAI API (service_tier: flex, priority, …)",
    wire=Wire(service_tier=True),
    rules=(*RULES, *COMMON_RULES),
    status_defaults={429: "rate_limited", **CANCEL_DEFAULTS},
    testbed="openai",
)
