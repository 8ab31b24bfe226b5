"""Stack profiles: how a request's tier is read, and the exact error each stack sends (stacks.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rushhour.testbed.config import TestbedConfig
from rushhour.testbed.job import (
    CANCELLED,
    DISPLACED,
    EVICTED,
    NO_ENDPOINTS,
    QUEUE_FULL,
    REPLICA_DOWN,
    TTL_EXPIRED,
    WAITING_TIMEOUT,
)

OBJECTIVE_HEADERS = ("x-llm-d-inference-objective", "x-gateway-inference-objective")
FAIRNESS_HEADERS = ("x-llm-d-inference-fairness-id", "x-gateway-inference-fairness-id")
DROPPED_REASON = "x-llm-d-request-dropped-reason"
# the gateway queue of one request (arrival → dispatch), in ms: the testbed's own header (real llm-d reports it
# only as a histogram per band); rushhour reads it as stacks.timing.GATEWAY_QUEUE_HEADER
GATEWAY_QUEUE_HEADER = "x-testbed-gateway-queue-ms"
# LiteLLM's own timing headers (proxy/common_request_processing.py), as stacks.timing.HEADERS reads them
LITELLM_OVERHEAD = "x-litellm-overhead-duration-ms"
LITELLM_DURATION = "x-litellm-response-duration-ms"

# ledger outcome of each drop kind
DROP_OUTCOME = {
    QUEUE_FULL: "queue_full",
    TTL_EXPIRED: "queue_timeout",
    WAITING_TIMEOUT: "queue_timeout",
    NO_ENDPOINTS: "overloaded",
    DISPLACED: "preempted",
    EVICTED: "preempted",
    REPLICA_DOWN: "failed",
    CANCELLED: "cancelled",
}

# messages llm-d-inference-sim uses for injected errors (pkg/llm-d-inference-sim)
INJECTED_MESSAGES = {
    400: ("The request is invalid.", "BadRequestError"),
    401: ("Incorrect API key provided.", "AuthenticationError"),
    403: ("Forbidden.", "PermissionDeniedError"),
    404: ("The model does not exist.", "NotFoundError"),
    429: ("Rate limit reached.", "RateLimitError"),
    500: ("Internal server error.", "InternalServerError"),
    503: ("The server is overloaded or not ready yet.", "ServiceUnavailableError"),
}


@dataclass
class Classified:
    """A request's tier as the stack reads it."""

    priority: int = 0  # effective numeric priority in the stack's own convention
    rank: float = 0.0  # engine order, lower = more urgent
    tier: int = 0  # headroom tier index
    tenant: str = "default-flow"
    objective: str | None = None
    service_tier: str | None = None


@dataclass
class Reply:
    """An error response plus its ledger classification."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    outcome: str = "failed"
    reason: str | None = None
    in_band: bool = False  # for streams that already sent 200: send body as an SSE data line


def _header(headers: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for n in names:
        v = headers.get(n)
        if v:
            return v.strip()
    return None


def _int_field(body: Mapping[str, Any], name: str) -> int:
    v = body.get(name, 0)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return 0
    return int(v)


def openai_error(status: int, message: str, etype: str, code: Any, param: Any = None) -> bytes:
    """OpenAI/vLLM error body {"error":{message,type,param,code}}."""
    return json.dumps({"error": {"message": message, "type": etype, "param": param, "code": code}}).encode()


def anthropic_error(etype: str, message: str, request_id: str) -> bytes:
    """Anthropic error body."""
    return json.dumps({"type": "error", "error": {"type": etype, "message": message},
                       "request_id": request_id}).encode()


class Profile:
    """Base profile: vLLM-like engine, OpenAI-style JSON errors, no tiers."""

    name = "vllm"
    gateway = False  # True: requests queue in the EPP flow controller before a replica
    prefix_aware = False  # llm-d's scorers prefer replicas holding the prompt prefix
    engine_metrics = True  # its model servers are vLLM: per-request ``metrics`` when cfg.vllm.per_request_metrics
    engine_metrics_in_streams = True  # False: a proxy in front re-chunks a stream without them (LiteLLM)
    proxy_timing = False  # True: LiteLLM's x-litellm-*-duration-ms headers on every served answer

    def __init__(self, cfg: TestbedConfig) -> None:
        self.cfg = cfg

    # ---- tiers ---------------------------------------------------------------------------
    def classify(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> Classified:
        """Read the request's tier; the base has none."""
        return Classified()

    # ---- error shapes ----------------------------------------------------------------------
    def error(self, status: int, message: str, etype: str, code: Any = None, rid: str = "",
              param: Any = None) -> Reply:
        """A generic error in this stack's shape (bad input, injected faults)."""
        return Reply(status, openai_error(status, message, etype, status if code is None else code, param),
                     reason=etype)

    def bad_request(self, message: str, rid: str, param: Any = None) -> Reply:
        """400 for malformed input."""
        return self.error(400, message, "BadRequestError", rid=rid, param=param)

    def too_large(self, limit: int, rid: str) -> Reply:
        """413 for an oversized body."""
        return self.error(413, f"Request body exceeds the limit of {limit} bytes.", "RequestTooLargeError",
                          rid=rid)

    def unknown_model(self, model: str, rid: str) -> Reply:
        """404 for a model that is not served, in vLLM 0.32's words (vllm/entrypoints/serve/engine/serving.py
        ``_check_model``: the served names follow)."""
        served = ", ".join(self.cfg.models)
        return self.error(404, f"The model `{model}` does not exist. Valid aliases: {served}.", "NotFoundError",
                          rid=rid, param="model")

    def injected(self, status: int, rid: str) -> Reply:
        """An injected error (fault schedule or x-rushhour-fault header)."""
        msg, etype = INJECTED_MESSAGES.get(status, ("Injected error.", "InternalServerError"))
        r = self.error(status, msg, etype, rid=rid)
        r.outcome, r.reason = "failed", f"injected-{status}"
        return r

    def not_ready(self, rid: str) -> Reply:
        """503 while warming up or with no replica up."""
        r = self.error(503, "The server is overloaded or not ready yet.", "ServiceUnavailableError", rid=rid)
        r.outcome, r.reason = "overloaded", "not-ready"
        return r

    def drop(self, kind: str, rid: str, stream_started: bool) -> Reply:
        """The response for a job dropped by flow control or the engine."""
        msg = {
            QUEUE_FULL: "The server is overloaded: the request queue is full.",
            TTL_EXPIRED: "Request timed out in queue.",
            WAITING_TIMEOUT: "Request waiting timeout reached.",
            DISPLACED: "The request is aborted by a higher priority request.",
            NO_ENDPOINTS: "The server is overloaded or not ready yet.",
            EVICTED: "Request evicted.",
            REPLICA_DOWN: "The engine died unexpectedly.",
            CANCELLED: "Client disconnected.",
        }[kind]
        r = self.error(503, msg, "ServiceUnavailableError", rid=rid)
        r.outcome, r.reason, r.in_band = DROP_OUTCOME[kind], kind, stream_started
        return r

    def extra_headers(self, cl: Classified, rid: str) -> dict[str, str]:
        """Headers added to every response of this profile."""
        return {}


class VllmProfile(Profile):
    """vLLM with --scheduling-policy priority: body `priority`, lower = more urgent."""

    name = "vllm"

    def classify(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> Classified:
        """Body field `priority` (int, default 0)."""
        p = _int_field(body, "priority")
        return Classified(priority=p, rank=float(p))


class LitellmProfile(VllmProfile):
    """LiteLLM 1.106.12 in front of vLLM: ``extra_body.priority`` reaches the engine (the top-level ``priority`` is
    its router's), its timing headers come on every served answer, and vLLM's ``metrics`` only on whole answers
    (it rebuilds a stream's chunks without them; both measured against the real pair, tests/real)."""

    name = "litellm"
    engine_metrics_in_streams = False
    proxy_timing = True

    def classify(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> Classified:
        """``extra_body.priority`` (int, default 0), as LiteLLM passes it into the upstream's body."""
        extra = body.get("extra_body")
        p = _int_field(extra, "priority") if isinstance(extra, Mapping) else 0
        return Classified(priority=p, rank=float(p))


class FifoProfile(Profile):
    """One FIFO queue, no tiers: the convoy-effect baseline."""

    name = "fifo"


class EppProfile(Profile):
    """llm-d-router v0.10 EPP with the flowControl feature gate."""

    name = "llm-d"
    gateway = True
    prefix_aware = True
    ttl_status = 429  # v0.10: TTL expiry with endpoints is 429 (#2047)
    reason_header = True  # x-llm-d-request-dropped-reason exists from v0.9

    def classify(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> Classified:
        """Objective header -> priority via the objective table; fairness header -> tenant."""
        objective = _header(headers, OBJECTIVE_HEADERS)
        prio = self.cfg.flow_control.objectives.get(objective, 0) if objective else 0
        tenant = _header(headers, FAIRNESS_HEADERS) or "default-flow"
        # the EPP never forwards priority to the model server, which stays FCFS
        return Classified(priority=prio, rank=0.0, tenant=tenant, objective=objective)

    def _text(self, status: int, code: str, msg: str, reason: str | None, outcome: str) -> Reply:
        headers = {DROPPED_REASON: reason} if (reason and self.reason_header) else {}
        return Reply(status, f"inference error: {code} - {msg}".encode(), "text/plain; charset=utf-8",
                     headers, outcome, reason)

    def bad_request(self, message: str, rid: str, param: Any = None) -> Reply:
        """The EPP parses the body itself: plain-text BadRequest."""
        return self._text(400, "BadRequest", message, None, "failed")

    def too_large(self, limit: int, rid: str) -> Reply:
        """The EPP refuses a body over its limit."""
        return self._text(413, "BadRequest", f"request body too large (limit {limit} bytes)", None, "failed")

    def not_ready(self, rid: str) -> Reply:
        """No ready endpoint in the pool."""
        return self._text(503, "ServiceUnavailable", "request rejected pre-queue: no endpoints available",
                          "rejected-no-endpoints", "overloaded")

    def drop(self, kind: str, rid: str, stream_started: bool) -> Reply:
        """EPP ImmediateResponse texts (stacks.md §1.4)."""
        if kind == QUEUE_FULL:
            return self._text(429, "ResourceExhausted", "request rejected pre-queue: queue at capacity",
                              "rejected-saturated", "queue_full")
        if kind == TTL_EXPIRED:
            code = "ResourceExhausted" if self.ttl_status == 429 else "ServiceUnavailable"
            return self._text(self.ttl_status, code,
                              "request timed out in queue: request evicted from queue: request TTL expired",
                              "rejected-ttl-expired", "queue_timeout")
        if kind == NO_ENDPOINTS:
            return self._text(503, "ServiceUnavailable", "request rejected: no endpoints available in the pool",
                              "rejected-no-endpoints", "overloaded")
        if kind == CANCELLED:
            return self._text(503, "ServiceUnavailable", "client disconnected: context canceled",
                              "rejected-context-cancelled", "cancelled")
        if kind == EVICTED:
            # requestcontrol: an ImmediateResponse 429 whose body is the bare text (no "inference error:")
            headers = {DROPPED_REASON: "evicted"} if self.reason_header else {}
            return Reply(429, b"request evicted by flow control", "text/plain; charset=utf-8", headers,
                         "preempted", "evicted")
        # the model server died under an in-flight request: Envoy's reset text
        return Reply(503, b"upstream connect error or disconnect/reset before headers. "
                     b"reset reason: connection termination", "text/plain", {}, "failed", REPLICA_DOWN)


    def sheddable_dropped(self) -> Reply:
        """Legacy admission (flowControl gate off): priority < 0 at pool saturation >= 1 (no reason header)."""
        return Reply(429, b"inference error: ResourceExhausted - system saturated, sheddable request dropped",
                     "text/plain; charset=utf-8", {}, "shed", "sheddable-dropped")

    def no_candidates(self) -> Reply:
        """Legacy admission with an empty pool."""
        return Reply(503, b"inference error: ServiceUnavailable - failed to find endpoint candidates for "
                     b"serving the request", "text/plain; charset=utf-8", {}, "overloaded", "no-endpoints")


class GaieV1Profile(EppProfile):
    """GAIE v1.x EPP: TTL expiry is 503, no dropped-reason header, no default TTL."""

    name = "gaie-v1"
    ttl_status = 503
    reason_header = False


class SglangProfile(Profile):
    """SGLang: body `priority`, higher = more urgent unless low_priority_values_first."""

    name = "sglang"
    engine_metrics = False

    def classify(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> Classified:
        """Body field `priority`; rank flips polarity unless low values come first."""
        p = _int_field(body, "priority")
        sg = self.cfg.sglang
        if not sg.priority_scheduling:
            return Classified(priority=p, rank=0.0)
        return Classified(priority=p, rank=float(p) if sg.low_priority_values_first else float(-p))

    def error(self, status: int, message: str, etype: str, code: Any = None, rid: str = "",
              param: Any = None) -> Reply:
        """SGLang's error object carries "object": "error"."""
        body = {"error": {"object": "error", "message": message, "type": etype, "param": param,
                          "code": status if code is None else code}}
        return Reply(status, json.dumps(body).encode(), reason=etype)

    def drop(self, kind: str, rid: str, stream_started: bool) -> Reply:
        """Queue full, priority abort and waiting timeout, all 503 (in-band once a stream began)."""
        msg = {
            QUEUE_FULL: "The request queue is full.",
            DISPLACED: "The request is aborted by a higher priority request.",
            WAITING_TIMEOUT: "Request waiting timeout reached.",
        }.get(kind)
        if msg is None:
            return super().drop(kind, rid, stream_started)
        r = self.error(503, msg, "SERVICE_UNAVAILABLE", rid=rid)
        r.outcome, r.reason, r.in_band = DROP_OUTCOME[kind], kind, stream_started
        return r


OPENAI_TIER_RANK = {"priority": 0.0, "default": 1.0, "flex": 2.0}


class OpenAIProfile(Profile):
    """OpenAI hosted API: body `service_tier`, flex 429 when saturated, rate-limit headers."""

    name = "openai"
    engine_metrics = False

    def classify(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> Classified:
        """service_tier auto/default -> default; flex; priority."""
        t = body.get("service_tier") or "auto"
        tier = t if t in ("flex", "priority") else "default"
        return Classified(priority=0, rank=OPENAI_TIER_RANK[tier], tenant=_api_key(headers),
                          service_tier=tier)

    def error(self, status: int, message: str, etype: str, code: Any = None, rid: str = "",
              param: Any = None) -> Reply:
        """OpenAI errors: invalid_request_error etc.; code is a string or null."""
        return Reply(status, openai_error(status, message, etype, code, param), reason=code or etype)

    def bad_request(self, message: str, rid: str, param: Any = None) -> Reply:
        """400 invalid_request_error."""
        return self.error(400, message, "invalid_request_error", rid=rid, param=param)

    def unknown_model(self, model: str, rid: str) -> Reply:
        """404 model_not_found."""
        return self.error(404, f"The model `{model}` does not exist or you do not have access to it.",
                          "invalid_request_error", "model_not_found", rid, "model")

    def flex_unavailable(self, rid: str) -> Reply:
        """Flex without capacity: 429 resource_unavailable (unbilled)."""
        r = self.error(429, "Resource Unavailable: flex capacity is currently unavailable. Please retry "
                       "later or use service_tier auto.", "resource_unavailable", "resource_unavailable",
                       rid)
        r.outcome = "shed"
        return r

    def rate_limited(self, model: str, limit: int, rid: str) -> Reply:
        """Per-key RPM limit reached."""
        r = self.error(429, f"Rate limit reached for {model} in organization org-testbed on requests per min "
                       f"(RPM): Limit {limit}, Used {limit}, Requested 1.", "requests", "rate_limit_exceeded",
                       rid)
        r.outcome = "rate_limited"
        return r


class AnthropicProfile(Profile):
    """Anthropic Messages API: service_tier auto/standard_only, 529 overloaded_error."""

    name = "anthropic"
    engine_metrics = False

    def classify(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> Classified:
        """auto may use priority capacity; standard_only never does."""
        t = body.get("service_tier") or "auto"
        if t == "standard_only":
            return Classified(rank=1.0, tenant=_api_key(headers), service_tier="standard")
        return Classified(rank=0.0, tenant=_api_key(headers), service_tier="priority")

    def error(self, status: int, message: str, etype: str, code: Any = None, rid: str = "",
              param: Any = None) -> Reply:
        """Anthropic error body; the type names follow its error page."""
        atype = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                 500: "api_error", 503: "api_error", 529: "overloaded_error"}.get(status, "api_error")
        return Reply(status, anthropic_error(atype, message, rid), headers={"request-id": rid}, reason=atype)

    def overloaded(self, rid: str) -> Reply:
        """529 Overloaded."""
        r = self.error(529, "Overloaded", "overloaded_error", rid=rid)
        r.outcome = "overloaded"
        return r

    def not_ready(self, rid: str) -> Reply:
        """Anthropic answers 529 when it has no capacity at all."""
        return self.overloaded(rid)

    def rate_limited(self, limit: int, retry_after_s: int, rid: str) -> Reply:
        """Per-key requests-per-minute limit: 429 rate_limit_error with retry-after (seconds)."""
        r = self.error(429, f"This request would exceed the rate limit for your organization of {limit} requests "
                       "per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can "
                       "see the response headers for current usage. Please try again later.", "rate_limit_error",
                       rid=rid)
        r.headers["retry-after"] = str(retry_after_s)
        r.outcome = "rate_limited"
        return r


class HeadroomProfile(Profile):
    """Multi-tier KV headroom placement: tiers from the objective header, nothing is rejected."""

    name = "headroom"
    engine_metrics = False

    def classify(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> Classified:
        """Objective header -> tier index (0 highest) via headroom.tiers."""
        hc = self.cfg.headroom
        objective = _header(headers, OBJECTIVE_HEADERS)
        tier = hc.tiers.get(objective, hc.default_tier) if objective else hc.default_tier
        return Classified(priority=tier, rank=float(tier), tier=tier, objective=objective,
                          tenant=_header(headers, FAIRNESS_HEADERS) or "default-flow")


def _api_key(headers: Mapping[str, str]) -> str:
    # tenant = a short fingerprint of the key, never the key itself
    auth = headers.get("authorization") or headers.get("x-api-key") or ""
    if not auth:
        return "anonymous"
    import hashlib

    return "key-" + hashlib.sha256(auth.encode()).hexdigest()[:8]


def make_profile(cfg: TestbedConfig) -> Profile:
    """The profile object for cfg.profile."""
    classes: dict[str, type[Profile]] = {
        "llm-d": EppProfile, "gaie-v1": GaieV1Profile, "vllm": VllmProfile, "litellm": LitellmProfile,
        "sglang": SglangProfile,
        "openai": OpenAIProfile, "anthropic": AnthropicProfile, "fifo": FifoProfile,
        "headroom": HeadroomProfile,
    }
    return classes[cfg.profile](cfg)
