"""Gateway API Inference Extension v1.x EPP: the older header names, TTL expiry as 503, no reason header."""

from __future__ import annotations

from rushhour.stacks.common import CANCEL_DEFAULTS, COMMON_RULES
from rushhour.stacks.llmd import FLOW_OUTCOMES, GAIE_OUTCOMES, outcome_checks
from rushhour.stacks.llmd import RULES as LLMD_RULES
from rushhour.stacks.profile import Metrics, StackProfile, Wire

METRICS = Metrics(
    prefixes=("inference_extension_", "llm_d_epp_", "vllm:", "testbed_"),
    checks=outcome_checks(GAIE_OUTCOMES, FLOW_OUTCOMES),
)

PROFILE = StackProfile(
    name="gaie-v1",
    summary="Gateway API Inference Extension v1.x EPP (x-gateway-inference-* headers)",
    wire=Wire(objective_header="x-gateway-inference-objective", fairness_header="x-gateway-inference-fairness-id",
              default_priority=0),
    rules=(*LLMD_RULES, *COMMON_RULES),
    status_defaults=dict(CANCEL_DEFAULTS),
    reason_headers=("x-llm-d-request-dropped-reason",),
    metrics=METRICS,
    testbed="gaie-v1",
)
