"""Rules every profile shares: markers that mean the same whoever sends them."""

from __future__ import annotations

from rushhour.stacks.profile import Rule

# Simulators and proxies in front of a stack say these the same way.
COMMON_RULES: tuple[Rule, ...] = (
    Rule("queue_full", r"waiting requests queue is full|failed to enqueue request",
         note="llm-d-inference-sim 429"),
    Rule("cancelled", r"client closed request", statuses=(499,), note="nginx/SMG 499"),
)

# 499 is a cancel the server reports (nginx, SMG) on every stack.
CANCEL_DEFAULTS: dict[int, str] = {499: "cancelled"}

# Every profile, after its own rules and defaults (TAXONOMY.md): statuses whose meaning does not depend
# on the stack (a bad request, a crash, a bad gateway). 429/503/529/408 are deliberately absent: they
# mean a policy on one stack and something else on another, so without a rule or a profile default
# they are ``unclassified`` and named in a finding (audit/classify.py).
COMMON_STATUS_DEFAULTS: dict[int, str] = {
    400: "failed", 401: "failed", 403: "failed", 404: "failed", 405: "failed", 413: "failed", 422: "failed",
    500: "failed", 502: "failed", 504: "failed",
}
