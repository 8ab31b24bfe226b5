"""Anthropic's Messages API: ``service_tier``, x-api-key, 529 overload apart from 429 quota."""

from __future__ import annotations

from rushhour.stacks.common import CANCEL_DEFAULTS, COMMON_RULES
from rushhour.stacks.profile import Rule, StackProfile, Wire

# stacks.md §5.
RULES: tuple[Rule, ...] = (
    Rule("overloaded", r"overloaded_error", note="529 / SSE error event: overload across all users"),
    Rule("rate_limited", r"rate_limit_error|enforced_spend_limit_reached", note="429 quota"),
)

PROFILE = StackProfile(
    name="anthropic",
    summary="Anthropic Messages API (service_tier, x-api-key)",
    wire=Wire(service_tier=True, anthropic_auth=True),
    rules=(*RULES, *COMMON_RULES),
    status_defaults={429: "rate_limited", 529: "overloaded", **CANCEL_DEFAULTS},
    testbed="anthropic",
)
