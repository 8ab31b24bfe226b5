"""SGLang model gateway (SMG): ``x-smg-priority``, drop facts in X-SMG-Error-Code / X-SMG-Preempted."""

from __future__ import annotations

from collections.abc import Mapping

from rushhour.stacks.common import CANCEL_DEFAULTS, COMMON_RULES
from rushhour.stacks.profile import Metrics, Rule, StackProfile, Wire

# stacks.md §7.
RULES: tuple[Rule, ...] = (
    Rule("queue_full", r"scheduler_queue_full", note="429 X-SMG-Error-Code"),
    Rule("queue_timeout", r"scheduler_queue_timeout", note="408 X-SMG-Error-Code"),
    Rule("preempted", r"preempted", statuses=(503,), note="503 + X-SMG-Preempted: true"),
)


def read_reason(headers: Mapping[str, str], status: int) -> str | None:
    """``X-SMG-Error-Code``, and ``preempted`` when ``X-SMG-Preempted: true`` (joined when both)."""
    code = headers.get("x-smg-error-code")
    preempted = str(headers.get("x-smg-preempted") or "").strip().lower() in ("true", "1", "yes")
    if preempted:
        return f"preempted {code}" if code else "preempted"
    return str(code) if code else None


PROFILE = StackProfile(
    name="smg",
    summary="SGLang model gateway (x-smg-priority header)",
    wire=Wire(priority_header="x-smg-priority"),
    rules=(*RULES, *COMMON_RULES),
    status_defaults={408: "queue_timeout", **CANCEL_DEFAULTS},
    reason_headers=("x-smg-error-code", "x-smg-preempted"),
    read_reason=read_reason,
    metrics=Metrics(prefixes=("smg_", "sglang:", "vllm:")),
    testbed="llm-d",
)
