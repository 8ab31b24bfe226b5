"""SGLang: body ``priority`` (higher = earlier by default), 503s that may arrive inside a 200 stream."""

from __future__ import annotations

from rushhour.stacks.common import CANCEL_DEFAULTS, COMMON_RULES
from rushhour.stacks.profile import Metrics, Rule, StackProfile, Wire
from rushhour.stacks.vllm import RULES as VLLM_RULES

# stacks.md §3.
RULES: tuple[Rule, ...] = (
    Rule("queue_timeout", r"request waiting timeout reached", note="SGLANG_REQ_WAITING_TIMEOUT (also in-band)"),
    Rule("queue_full", r"request queue is full", note="--max-queued-requests"),
    # The victim had been admitted into the scheduler's waiting queue (an arrival that is not admitted
    # gets "The request queue is full."), so this is a kill after admission: preempted, as DESIGN.md
    # lists it and as the testbed's ledger records it. Whether it had streamed shows separately in
    # ``preempted_after_first_token``.
    Rule("preempted", r"aborted by a higher priority request",
         note="least-preferred admitted waiter aborted for a higher-priority arrival (priority mode)"),
    Rule("failed", r"request running timeout reached", note="server-side running timeout"),
)

PROFILE = StackProfile(
    name="sglang",
    summary="SGLang server, priority scheduling (body priority, higher = earlier)",
    wire=Wire(priority_body="as_is", pin_output=True),
    rules=(*RULES, *VLLM_RULES, *COMMON_RULES),
    status_defaults=dict(CANCEL_DEFAULTS),
    metrics=Metrics(prefixes=("sglang:", "vllm:")),
    testbed="sglang",
)
