"""Rules every profile shares: markers that mean the same whoever sends them."""

from __future__ import annotations

from stacks.profile import Rule

# Simulators and proxies in front of a stack say these the same way.
COMMON_RULES: tuple[Rule, ...] = (
    Rule("queue_full", r"waiting requests queue is full|failed to enqueue request",
         note="llm-d-inference-sim 429"),
    Rule("cancelled", r"client closed request", statuses=(499,), note="nginx/SMG 499"),
)

# 499 is a cancel the server reports (nginx, SMG) on every stack.
CANCEL_DEFAULTS: dict[int, str] = {499: "cancelled"}
