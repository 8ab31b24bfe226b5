"""llm-d-router (EPP flow control, v0.9+): objective and fairness headers, the dropped-reason header."""

from __future__ import annotations

from rushhour.stacks.common import CANCEL_DEFAULTS, COMMON_RULES
from rushhour.stacks.profile import CounterCheck, Metrics, Rule, StackProfile, Wire

DROPPED_REASON = "x-llm-d-request-dropped-reason"

# stacks.md §1.4: the dropped-reason header first, then the plain-text body, so GAIE v1 (no header,
# TTL = 503) and llm-d v0.10 (header, TTL = 429) agree.
RULES: tuple[Rule, ...] = (
    Rule("queue_full", r"rejected-saturated", note="llm-d ≥ v0.9 header: band/global queue at capacity"),
    Rule("queue_timeout", r"rejected-ttl-expired", note="llm-d header: queue TTL expired (429 in v0.10)"),
    Rule("overloaded", r"rejected-no-endpoints", note="llm-d header: pool has no endpoints (503)"),
    Rule("cancelled", r"rejected-context-cancelled", note="client disconnected while queued (503)"),
    Rule("overloaded", r"rejected-shutting-down", note="flow controller shutting down: no capacity"),
    Rule("preempted", r"\bevicted\b(?!\s+from queue)|request evicted by flow control",
         note="in-flight eviction (enableEviction) or revocation (PR #2249): TerminationCause evicted"),
    Rule("shed", r"system saturated, sheddable request dropped", note="legacy admission, priority < 0"),
    Rule("queue_full", r"queue at capacity", note="GAIE v1 body (no header): queue full"),
    Rule("queue_timeout", r"timed out in queue|request ttl expired", note="GAIE v1: 503 TTL expiry"),
    Rule("cancelled", r"client disconnected", note="GAIE v1 body: client gone while queued"),
    Rule("overloaded", r"failed to find endpoint candidates", note="empty pool without flow control"),
    Rule("overloaded", r"flow controller shutting down", note="GAIE v1 shutdown"),
)

# stacks.md §1.6: per-priority outcome counters (the testbed exports the same names); GAIE v1's
# queue-duration histogram count by outcome is the same counter under its older name.
FLOW_OUTCOMES = "llm_d_epp_flow_control_requests_total"
GAIE_OUTCOMES = "inference_extension_flow_control_request_queue_duration_seconds_count"
# outcome label → what the client counts (no_endpoints: the reason header rejected-no-endpoints)
OUTCOMES = (("admitted", "Dispatched"), ("queue_full", "RejectedCapacity"), ("queue_timeout", "EvictedTTL"),
            ("no_endpoints", "RejectedNoEndpoints"))


def outcome_checks(metric: str, alternative: str) -> tuple[CounterCheck, ...]:
    """Per-priority checks of the EPP's outcome counter (``alternative``: the other version's name)."""
    return tuple(CounterCheck(client, metric, (alternative,), select={"outcome": (outcome,)}, by="priority",
                              note=f"EPP outcome {outcome} per priority (stacks.md §1.6)")
                 for client, outcome in OUTCOMES)


# llm-d demand-driven revocation (PR #2249, llm-d-router docs/metrics.md): each running priority<0 request the
# router revoked for a blocked higher band, by the victim's priority. Its client sees a 429 with the dropped
# reason ``evicted`` before any byte (class preempted), or, once a stream's 200 is out, a stream cut with nothing
# to tell it from a network cut (class failed): the check matches on the 429 path, cut streams are tolerance.
REVOCATIONS = "llm_d_epp_flow_control_revocations_issued_total"
REVOCATION_CHECK = CounterCheck("preempted", REVOCATIONS, by="priority", unsure="cut",
                                note="revocations per victim priority: the 429 evicted path (cut streams: tolerance)")

# the router's own families (the rest of the profile's prefixes are its model servers' and the testbed's)
ROUTER_PREFIXES = ("llm_d_epp_", "inference_extension_")
# llm-d-router docs/metrics.md: the fairness_id label holds at most 1,000 values; later tenants count as "other"
FAIRNESS_ID_CAP = 1000

METRICS = Metrics(
    prefixes=(*ROUTER_PREFIXES, "vllm:", "testbed_"),
    checks=(*outcome_checks(FLOW_OUTCOMES, GAIE_OUTCOMES), REVOCATION_CHECK),
    fairness_label="fairness_id",
    fairness_cap=FAIRNESS_ID_CAP,
    # stacks.md §1.6: labelled fairness_id, priority (and outcome); the queue duration counts every request
    fairness_families=("llm_d_epp_flow_control_request_queue_duration_seconds_count", "llm_d_epp_inflight_requests",
                       "llm_d_epp_request_ttft_seconds_count"),
)

PROFILE = StackProfile(
    name="llm-d",
    summary="llm-d-router EPP flow control (InferenceObjective priority by header)",
    wire=Wire(objective_header="x-llm-d-inference-objective", fairness_header="x-llm-d-inference-fairness-id",
              pin_output=True,  # its model servers are vLLM (or SGLang): both read the fields
              default_priority=0),  # no header or no such objective → priority 0 (stacks.md §1)
    rules=(*RULES, *COMMON_RULES),
    status_defaults=dict(CANCEL_DEFAULTS),
    reason_headers=(DROPPED_REASON,),
    metrics=METRICS,
    testbed="llm-d",
    # the testbed's own policies speak llm-d: scenario name → the testbed profile it starts
    aliases=(("testbed", "llm-d"), ("fifo", "fifo"), ("headroom", "headroom")),
)
