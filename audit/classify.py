"""Classify request attempts into the outcome taxonomy, per stack profile, from raw facts only.

Status codes alone lie (DESIGN.md): llm-d v0.10 answers a queue TTL with 429 where GAIE v1 answered
503, SGLang sends its 503 inside a 200 stream. So each profile has an ordered table of rules over
(status, a text "haystack" = reason + error + in-band error, whether a first token arrived); the
first rule that matches wins. Rules run once per *distinct* combination of those facts (a run has
a few dozen), then map back to every row, so a million attempts classify in milliseconds.

Precedence for one attempt:
1. ``not_sent`` → not_sent (the generator's own fault).
2. an in-band error (inside a 200 stream) → the profile's rules on that text, else ``failed``:
   an in-band error is never ``served``.
3. an HTTP error status (≥ 300) → the profile's rules, else the profile's status default, else ``failed``.
4. a 2xx: ``complete`` → served; else client timeout → timeout; generator stopped → cancelled;
   otherwise failed (a stream cut before its end marker).
5. no response (status 0): client timeout → timeout; generator stopped → cancelled; else transport.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from audit.summary import OUTCOME_CLASSES

PROFILE_ALIASES = {"testbed": "llm-d", "fifo": "llm-d", "headroom": "llm-d"}
DEFAULT_PROFILE = "llm-d"

FACT_COLUMNS = ("status", "reason", "error", "in_band_error", "complete", "cancelled", "not_sent",
                "client_timeout", "transport_error", "first_token_ns")


@dataclass(frozen=True)
class Rule:
    """``statuses`` (None = any) and ``pattern`` (regex on the haystack) and ``first_token`` → ``cls``."""

    cls: str
    pattern: str | None = None
    statuses: tuple[int, ...] | None = None
    first_token: bool | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.cls not in OUTCOME_CLASSES:
            raise ValueError(f"unknown class {self.cls!r}")


# llm-d-router / GAIE flow control (stacks.md §1.4): the dropped-reason header first, then the
# plain-text body, so GAIE v1 (no header, TTL = 503) and llm-d v0.10 (header, TTL = 429) agree.
_LLMD = [
    Rule("queue_full", r"rejected-saturated", note="llm-d ≥ v0.9 header: band/global queue at capacity"),
    Rule("queue_timeout", r"rejected-ttl-expired", note="llm-d header: queue TTL expired (429 in v0.10)"),
    Rule("overloaded", r"rejected-no-endpoints", note="llm-d header: pool has no endpoints (503)"),
    Rule("cancelled", r"rejected-context-cancelled", note="client disconnected while queued (503)"),
    Rule("overloaded", r"rejected-shutting-down", note="flow controller shutting down: no capacity"),
    Rule("preempted", r"\bevicted\b(?!\s+from queue)|request evicted by flow control",
         note="in-flight eviction (enableEviction)"),
    Rule("shed", r"system saturated, sheddable request dropped", note="legacy admission, priority < 0"),
    Rule("queue_full", r"queue at capacity", note="GAIE v1 body (no header): queue full"),
    Rule("queue_timeout", r"timed out in queue|request ttl expired", note="GAIE v1: 503 TTL expiry"),
    Rule("cancelled", r"client disconnected", note="GAIE v1 body: client gone while queued"),
    Rule("overloaded", r"failed to find endpoint candidates", note="empty pool without flow control"),
    Rule("overloaded", r"flow controller shutting down", note="GAIE v1 shutdown"),
]

# SGLang (stacks.md §3): 503s, possibly inside a 200 stream.
_SGLANG = [
    Rule("queue_timeout", r"request waiting timeout reached", note="SGLANG_REQ_WAITING_TIMEOUT (also in-band)"),
    Rule("queue_full", r"request queue is full", note="--max-queued-requests"),
    # The victim had been admitted into the scheduler's waiting queue (an arrival that is not admitted
    # gets "The request queue is full."), so this is a kill after admission: preempted, as DESIGN.md
    # lists it and as the testbed's ledger records it. Whether it had streamed shows separately in
    # ``preempted_after_first_token``.
    Rule("preempted", r"aborted by a higher priority request",
         note="least-preferred admitted waiter aborted for a higher-priority arrival (priority mode)"),
    Rule("failed", r"request running timeout reached", note="server-side running timeout"),
]

# vLLM (stacks.md §2): --max-num-queued-reqs/-tokens → 503 QueueOverflowError.
_VLLM = [
    Rule("queue_full", r"queueoverflow|queue overflow|queue is full|max[-_ ]num[-_ ]queued|too many queued",
         statuses=(503, 429), note="AsyncLLM queue overflow (PR #49445)"),
    Rule("overloaded", r"server is overloaded or not ready", note="inference-sim style 503"),
]

# OpenAI (stacks.md §4).
_OPENAI = [
    Rule("shed", r"resource_unavailable|resource unavailable", note="flex without capacity (unbilled 429)"),
    Rule("rate_limited", r"rate_limit_exceeded|rate limit reached|insufficient_quota|ratelimiterror",
         note="quota, not capacity"),
    Rule("overloaded", r"server_is_overloaded|service_unavailable_error|engine is currently overloaded",
         note="Responses API in-band overload, 503 overload"),
]

# Anthropic (stacks.md §5).
_ANTHROPIC = [
    Rule("overloaded", r"overloaded_error", note="529 / SSE error event: overload across all users"),
    Rule("rate_limited", r"rate_limit_error|enforced_spend_limit_reached", note="429 quota"),
]

# SMG gateway (stacks.md §7).
_SMG = [
    Rule("queue_full", r"scheduler_queue_full", note="429 X-SMG-Error-Code"),
    Rule("queue_timeout", r"scheduler_queue_timeout", note="408 X-SMG-Error-Code"),
    Rule("preempted", r"preempted", statuses=(503,), note="503 + X-SMG-Preempted: true"),
]

# Markers that mean the same thing whoever sends them (simulators, proxies in front of a stack).
_COMMON = [
    Rule("queue_full", r"waiting requests queue is full|failed to enqueue request",
         note="llm-d-inference-sim 429"),
    Rule("cancelled", r"client closed request", statuses=(499,), note="nginx/SMG 499"),
]

PROFILE_RULES: dict[str, list[Rule]] = {
    "llm-d": [*_LLMD, *_COMMON],
    "gaie-v1": [*_LLMD, *_COMMON],
    "vllm": [*_VLLM, *_COMMON],
    "sglang": [*_SGLANG, *_VLLM, *_COMMON],
    "openai": [*_OPENAI, *_COMMON],
    "anthropic": [*_ANTHROPIC, *_COMMON],
    "smg": [*_SMG, *_COMMON],
}

# When no rule matched an error status: what that status means on this profile (else ``failed``).
STATUS_DEFAULTS: dict[str, dict[int, str]] = {
    "llm-d": {499: "cancelled"},
    "gaie-v1": {499: "cancelled"},
    "vllm": {499: "cancelled"},
    "sglang": {499: "cancelled"},
    "openai": {429: "rate_limited", 499: "cancelled"},
    "anthropic": {429: "rate_limited", 529: "overloaded", 499: "cancelled"},
    "smg": {408: "queue_timeout", 499: "cancelled"},
}

_COMPILED: dict[str, re.Pattern[str]] = {}


def _regex(pattern: str) -> re.Pattern[str]:
    if pattern not in _COMPILED:
        _COMPILED[pattern] = re.compile(pattern, re.IGNORECASE)
    return _COMPILED[pattern]


def normalise_profile(profile: str | None) -> str:
    """The rule table a profile uses (testbed, fifo and headroom speak llm-d)."""
    name = (profile or DEFAULT_PROFILE).lower()
    name = PROFILE_ALIASES.get(name, name)
    return name if name in PROFILE_RULES else DEFAULT_PROFILE


def classify_one(
    profile: str | None,
    *,
    status: int = 0,
    reason: str | None = None,
    error: str | None = None,
    in_band_error: str | None = None,
    complete: bool = False,
    cancelled: bool = False,
    not_sent: bool = False,
    client_timeout: bool = False,
    transport_error: bool = False,
    first_token: bool = False,
) -> str:
    """The class of one attempt (the reference the vectorised path is tested against)."""
    name = normalise_profile(profile)
    if not_sent:
        return "not_sent"
    if in_band_error:
        haystack = " | ".join(t for t in (reason, error, in_band_error) if t)
        return _match(name, haystack, status, first_token) or "failed"
    if status >= 300:
        haystack = " | ".join(t for t in (reason, error) if t)
        found = _match(name, haystack, status, first_token)
        return found or STATUS_DEFAULTS.get(name, {}).get(status, "failed")
    if 200 <= status < 300:
        if complete:
            return "served"
        if client_timeout:
            return "timeout"
        if cancelled:
            return "cancelled"
        return "failed"
    if client_timeout:
        return "timeout"
    if cancelled:
        return "cancelled"
    return "transport"


def _match(profile: str, haystack: str, status: int, first_token: bool) -> str | None:
    for rule in PROFILE_RULES[profile]:
        if rule.statuses is not None and status not in rule.statuses:
            continue
        if rule.first_token is not None and rule.first_token != first_token:
            continue
        if rule.pattern is not None and not _regex(rule.pattern).search(haystack):
            continue
        return rule.cls
    return None


def _codes(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(integer code per row, the distinct values); missing text becomes ''."""
    series = pd.Series(values)
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = np.asarray(series.cat.categories.astype(str), dtype=object)
        codes = series.cat.codes.to_numpy().astype(np.int64)
        return np.where(codes < 0, len(cats), codes), np.append(cats, "")
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    uniq = np.asarray(uniques, dtype=object)
    return np.where(codes < 0, len(uniq), codes).astype(np.int64), np.append(uniq, "" if uniq.dtype == object else 0)


def classify_frame(df: pd.DataFrame, profile: str | pd.Series | None = None) -> pd.Series:
    """Class of every attempt of ``df`` (request records); ``profile`` may be one name or one per row."""
    n = len(df)
    if n == 0:
        return pd.Series(pd.Categorical([], categories=OUTCOME_CLASSES), index=df.index)

    def col(name: str, default: object) -> pd.Series:
        return df[name] if name in df.columns else pd.Series([default] * n, index=df.index)

    profiles = (profile.astype(str).to_numpy() if isinstance(profile, pd.Series)
                else np.full(n, normalise_profile(profile), dtype=object))
    columns = [
        _codes(profiles),
        _codes(col("status", 0).fillna(0).astype(np.int64).to_numpy()),
        _codes(col("reason", None)),
        _codes(col("error", None)),
        _codes(col("in_band_error", None)),
    ]
    flags = ("complete", "cancelled", "not_sent", "client_timeout", "transport_error")
    bits = np.zeros(n, dtype=np.int64)
    for i, name in enumerate(flags):
        bits |= col(name, False).astype(bool).to_numpy().astype(np.int64) << i
    bits |= col("first_token_ns", np.nan).notna().to_numpy().astype(np.int64) << len(flags)
    # One integer per distinct combination of facts (mixed radix); a run has a few dozen of them.
    key = bits
    radix = 1 << (len(flags) + 1)
    for codes, uniques in columns:
        key = key + codes * radix
        radix *= len(uniques) + 1
    if radix >= 2**62:  # absurdly many distinct texts: fall back to sorting rows of codes
        stacked = np.stack([c for c, _ in columns] + [bits], axis=1)
        _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    else:
        inverse, uniques = pd.factorize(key)
        first = np.full(len(uniques), -1, dtype=np.int64)
        first[inverse[::-1]] = np.arange(n - 1, -1, -1)  # first row of each combination
    classes = []
    for row in first:
        profile_v, status_v, reason_v, error_v, band_v = (u[c[row]] for c, u in columns)
        b = int(bits[row])
        classes.append(_classify_key((profile_v, status_v, reason_v, error_v, band_v,
                                      *(bool(b >> i & 1) for i in range(len(flags) + 1)))))
    mapped = np.asarray(classes, dtype=object)[np.asarray(inverse).reshape(-1)]
    return pd.Series(pd.Categorical(mapped, categories=OUTCOME_CLASSES), index=df.index)


def _classify_key(key: tuple[object, ...]) -> str:
    (profile, status, reason, error, in_band, complete, cancelled, not_sent, timeout, transport,
     first_token) = key
    return classify_one(
        str(profile), status=int(str(status)),
        reason=str(reason) or None, error=str(error) or None, in_band_error=str(in_band) or None,
        complete=bool(complete), cancelled=bool(cancelled), not_sent=bool(not_sent),
        client_timeout=bool(timeout), transport_error=bool(transport), first_token=bool(first_token),
    )


def rules_table() -> list[dict[str, object]]:
    """Every rule, in order, for docs and the report's appendix."""
    rows: list[dict[str, object]] = []
    for profile, rules in PROFILE_RULES.items():
        for order, rule in enumerate(rules, 1):
            rows.append({"profile": profile, "order": order, "class": rule.cls, "pattern": rule.pattern,
                         "statuses": rule.statuses, "first_token": rule.first_token, "note": rule.note})
        for status, cls in STATUS_DEFAULTS.get(profile, {}).items():
            rows.append({"profile": profile, "order": None, "class": cls, "pattern": None,
                         "statuses": (status,), "first_token": None, "note": "status default"})
    return rows


def profiles_for_routes(default: str | None, routes: Mapping[str, str]) -> dict[str, str]:
    """Route name → rule-table profile (fallback routes may point at other stacks)."""
    table = {"primary": normalise_profile(default)}
    table.update({name: normalise_profile(p) for name, p in routes.items()})
    return table
