"""Classification of every documented real response (stacks.md), per profile, scalar and vectorised."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rushhour.audit.classify import PROFILE_RULES, classify_frame, classify_one, normalise_profile, rules_table

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vendor"
VENDOR = [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]


def facts_from_response(case: dict[str, Any]) -> dict[str, Any]:
    """What the loadgen records from a raw response: reason header/error code, body text, in-band error.

    Mirrors record.py's field meanings: ``reason`` = dropped-reason header or the error's code/type,
    ``error`` = the short body text, ``in_band_error`` = an error event inside a 200 stream.
    """
    headers = {k.lower(): v for k, v in case["headers"].items()}
    body: str = case["body"]
    status = int(case["status"])
    reason = headers.get("x-llm-d-request-dropped-reason") or headers.get("x-smg-error-code")
    if headers.get("x-smg-preempted") == "true":
        reason = reason or "x-smg-preempted"
    in_band = None
    complete = False
    if status == 200 and case.get("stream"):
        # SSE lines end at CR, LF or CRLF only (str.splitlines would also cut at U+0085 or U+2028 in content)
        events = [line[5:].strip() for line in re.split(r"\r\n|\r|\n", body) if line.startswith("data:")]
        for data in events:
            if data == "[DONE]":
                continue
            obj = json.loads(data)
            if "error" in obj and obj.get("type") in (None, "error"):
                in_band = json.dumps(obj["error"])
        complete = "[DONE]" in events or '"message_stop"' in body or "response.completed" in body
        return {"status": status, "reason": reason, "in_band_error": in_band, "complete": complete,
                "first_token": '"delta"' in body and in_band is None}
    if body.lstrip().startswith("{"):
        err = json.loads(body).get("error") or {}
        if isinstance(err, dict):
            reason = reason or err.get("code") if isinstance(err.get("code"), str) else reason or err.get("type")
    return {"status": status, "reason": reason, "error": body[:300], "complete": False}


@pytest.mark.parametrize("case", VENDOR, ids=[f"{c['profile']}-{c['case']}" for c in VENDOR])
def test_vendor_fixture(case: dict[str, Any]) -> None:
    facts = facts_from_response(case)
    assert classify_one(case["profile"], **facts) == case["expected_class"]


def test_vendor_fixtures_exist() -> None:
    assert len(VENDOR) >= 15, "helper-3's tests/fixtures/vendor should hold the stacks.md responses"


LLMD_SAT = "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
TTL_TEXT = "request timed out in queue: request evicted from queue: request TTL expired"
LLMD_TTL = "inference error: ResourceExhausted - " + TTL_TEXT
GAIE_TTL = "inference error: ServiceUnavailable - " + TTL_TEXT
SHEDDABLE = "system saturated, sheddable request dropped"

# (profile, facts, expected): the exact responses of stacks.md, plus the client-side flags.
CASES: list[tuple[str, dict[str, Any], str]] = [
    # llm-d v0.10 (§1.4)
    ("llm-d", {"status": 429, "reason": "rejected-saturated", "error": LLMD_SAT}, "queue_full"),
    ("llm-d", {"status": 503, "reason": "rejected-no-endpoints", "error": LLMD_SAT}, "overloaded"),
    ("llm-d", {"status": 429, "reason": "rejected-ttl-expired", "error": LLMD_TTL}, "queue_timeout"),
    ("llm-d", {"status": 503, "reason": "rejected-no-endpoints", "error": LLMD_TTL}, "overloaded"),
    ("llm-d", {"status": 503, "reason": "rejected-context-cancelled",
               "error": "inference error: ServiceUnavailable - client disconnected: context canceled"}, "cancelled"),
    ("llm-d", {"status": 503, "reason": "rejected-shutting-down",
               "error": "inference error: ServiceUnavailable - flow controller shutting down: x"}, "overloaded"),
    ("llm-d", {"status": 429, "error": "inference error: ResourceExhausted - " + SHEDDABLE}, "shed"),
    ("llm-d", {"status": 429, "reason": "evicted",
               "error": "inference error: ResourceExhausted - request evicted by flow control"}, "preempted"),
    ("llm-d", {"status": 429, "reason": "evicted", "first_token": True}, "preempted"),
    ("llm-d", {"status": 503, "error": "failed to find endpoint candidates for serving the request"}, "overloaded"),
    ("llm-d", {"status": 500, "error": "inference error: Internal - boom"}, "failed"),
    ("llm-d", {"status": 429}, "unclassified"),  # a bare 429 says nothing about why: not guessed, named
    # GAIE v1 (no header; TTL = 503; docs say 503 for capacity, code sends 429: body decides)
    ("gaie-v1", {"status": 503, "error": GAIE_TTL}, "queue_timeout"),
    ("gaie-v1", {"status": 429, "error": LLMD_SAT}, "queue_full"),
    ("gaie-v1", {"status": 503, "error": LLMD_SAT}, "queue_full"),
    ("gaie-v1", {"status": 503, "error": "inference error: ServiceUnavailable - " + SHEDDABLE}, "shed"),
    # testbed / fifo / headroom speak llm-d
    ("testbed", {"status": 429, "reason": "rejected-saturated"}, "queue_full"),
    ("fifo", {"status": 429, "reason": "rejected-ttl-expired"}, "queue_timeout"),
    ("headroom", {"status": 503, "reason": "rejected-no-endpoints"}, "overloaded"),
    # SGLang (§3)
    ("sglang", {"status": 503, "error": '{"message": "The request queue is full.", "code": 503}'}, "queue_full"),
    # the victim was admitted to the waiting queue (DESIGN.md lists it under preempted)
    ("sglang", {"status": 503, "error": "The request is aborted by a higher priority request."}, "preempted"),
    ("sglang", {"status": 200, "in_band_error": "The request is aborted by a higher priority request.",
                "reason": "SERVICE_UNAVAILABLE"}, "preempted"),
    ("sglang", {"status": 200, "first_token": True,
                "in_band_error": '{"message":"The request is aborted by a higher priority request.","code":503}'},
     "preempted"),
    ("sglang", {"status": 200, "complete": True, "in_band_error":
                '{"object":"error","message":"Request waiting timeout reached.","type":"SERVICE_UNAVAILABLE",'
                '"code":503}'}, "queue_timeout"),
    ("sglang", {"status": 503, "error": "Request waiting timeout reached."}, "queue_timeout"),
    ("sglang", {"status": 200, "in_band_error": '{"message":"Request running timeout reached.","code":503}',
                "first_token": True}, "failed"),
    ("sglang", {"status": 200, "in_band_error": '{"message":"something odd","code":500}', "complete": True},
     "unclassified"),
    # vLLM (§2)
    ("vllm", {"status": 503, "error": '{"error":{"message":"QueueOverflowError: max_num_queued_reqs reached"}}'},
     "queue_full"),
    ("vllm", {"status": 503, "error": "The server is overloaded or not ready yet."}, "overloaded"),
    ("vllm", {"status": 400, "error": "context length exceeded"}, "failed"),
    ("vllm", {"status": 429, "error": '{"error":{"message":"Failed to enqueue request, waiting requests queue is full",'
                                      '"type":"RateLimitError","code":429}}'}, "queue_full"),
    # OpenAI (§4)
    ("openai", {"status": 429, "reason": "resource_unavailable", "error": "Resource Unavailable"}, "shed"),
    ("openai", {"status": 429, "reason": "rate_limit_exceeded",
                "error": "Rate limit reached for gpt-4o in organization org-x on requests per min (RPM)"},
     "rate_limited"),
    ("openai", {"status": 429}, "rate_limited"),
    ("openai", {"status": 200, "in_band_error": '{"type":"service_unavailable_error","code":"server_is_overloaded"}'},
     "overloaded"),
    # Anthropic (§5)
    ("anthropic", {"status": 529, "reason": "overloaded_error", "error": "Overloaded"}, "overloaded"),
    ("anthropic", {"status": 529}, "overloaded"),
    ("anthropic", {"status": 429, "reason": "rate_limit_error"}, "rate_limited"),
    ("anthropic", {"status": 200, "in_band_error": '{"type":"overloaded_error","message":"Overloaded"}',
                   "first_token": True}, "overloaded"),
    ("anthropic", {"status": 500, "reason": "api_error"}, "failed"),
    # SMG (§7)
    ("smg", {"status": 429, "reason": "scheduler_queue_full"}, "queue_full"),
    ("smg", {"status": 408, "reason": "scheduler_queue_timeout"}, "queue_timeout"),
    ("smg", {"status": 503, "reason": "X-SMG-Preempted: true"}, "preempted"),
    ("smg", {"status": 499}, "cancelled"),
    ("smg", {"status": 503, "error": "upstream unavailable"}, "unclassified"),
    # client-side facts, any profile
    ("llm-d", {"status": 200, "complete": True, "first_token": True}, "served"),
    ("llm-d", {"status": 200, "complete": False, "first_token": True}, "failed"),  # truncated stream
    ("llm-d", {"status": 200, "complete": False, "client_timeout": True}, "timeout"),
    ("llm-d", {"status": 200, "complete": False, "cancelled": True}, "unfinished"),
    ("llm-d", {"status": 0, "client_timeout": True}, "timeout"),
    ("llm-d", {"status": 0, "transport_error": True, "error": "connection refused"}, "transport"),
    ("llm-d", {"status": 0}, "transport"),
    ("llm-d", {"status": 0, "cancelled": True}, "unfinished"),
    ("llm-d", {"status": 0, "not_sent": True}, "not_sent"),
    ("llm-d", {"status": 0, "not_sent": True, "reason": "budget"}, "not_sent"),  # loadgen cost guard
    # loadgen's breaker refused to send: nothing left the machine (no ledger line), like a transport error
    ("llm-d", {"status": 0, "reason": "breaker_open", "error": "circuit breaker open on route primary"}, "transport"),
    ("openai", {"status": 200, "not_sent": True, "complete": True}, "not_sent"),
]


@pytest.mark.parametrize(("profile", "facts", "expected"), CASES)
def test_documented_response(profile: str, facts: dict[str, Any], expected: str) -> None:
    assert classify_one(profile, **facts) == expected


def test_vectorised_matches_scalar() -> None:
    rows, profiles, expected = [], [], []
    for profile, facts, want in CASES * 3:
        row = {"status": facts.get("status", 0), "reason": facts.get("reason"), "error": facts.get("error"),
               "in_band_error": facts.get("in_band_error"), "complete": facts.get("complete", False),
               "cancelled": facts.get("cancelled", False), "not_sent": facts.get("not_sent", False),
               "client_timeout": facts.get("client_timeout", False),
               "transport_error": facts.get("transport_error", False),
               "first_token_ns": 1.0 if facts.get("first_token") else np.nan}
        rows.append(row)
        profiles.append(profile)
        expected.append(want)
    frame = pd.DataFrame(rows)
    frame["reason"] = frame["reason"].astype("category")
    got = classify_frame(frame, pd.Series(profiles))
    assert list(got.astype(str)) == expected


def test_single_profile_and_empty_frame() -> None:
    frame = pd.DataFrame({"status": [429, 200], "reason": ["rejected-saturated", None], "complete": [False, True]})
    assert list(classify_frame(frame, "llm-d").astype(str)) == ["queue_full", "served"]
    assert len(classify_frame(frame.iloc[0:0], "llm-d")) == 0


def test_profiles_normalise() -> None:
    assert normalise_profile("testbed") == "llm-d"
    assert normalise_profile(None) == "llm-d"
    assert normalise_profile("unknown-stack") == "llm-d"
    assert set(PROFILE_RULES) == {"llm-d", "gaie-v1", "vllm", "sglang", "openai", "anthropic", "smg", "litellm"}


def test_rules_table_lists_every_rule() -> None:
    rows = rules_table()
    assert sum(1 for r in rows if r["order"] is not None) == sum(len(v) for v in PROFILE_RULES.values())
    assert all(r["note"] for r in rows)


# --------------------------------------------------------------------------- taxonomy v2 (issue 12)


@pytest.mark.parametrize(("profile", "facts", "expected"), [
    # an answer no rule knows is never silently fine: before, these were `failed` (or hid real vLLM's 503s)
    ("vllm", {"status": 503, "error": "The engine is currently busy, try again later"}, "unclassified"),
    ("llm-d", {"status": 529}, "unclassified"),
    ("llm-d", {"status": 408}, "unclassified"),
    ("llm-d", {"status": 200, "in_band_error": "weird thing", "complete": True}, "unclassified"),
    # the common status defaults hold on every profile
    *((p, {"status": code}, "failed") for p in ("llm-d", "vllm", "openai") for code in (400, 404, 422, 500, 502, 504)),
    # a profile default still wins over unclassified
    ("openai", {"status": 429}, "rate_limited"),
    ("smg", {"status": 408}, "queue_timeout"),
    # the generator stopping is `unfinished`; only a server-reported cancel is `cancelled`
    ("llm-d", {"status": 200, "complete": False, "cancelled": True, "first_token": True}, "unfinished"),
    ("llm-d", {"status": 499}, "cancelled"),
    ("llm-d", {"status": 0, "cancelled": True, "client_timeout": True}, "timeout"),
    ("llm-d", {"status": 0, "not_sent": True, "cancelled": True}, "not_sent"),
])
def test_taxonomy_v2_precedence(profile: str, facts: dict[str, Any], expected: str) -> None:
    assert classify_one(profile, **facts) == expected


def test_groups() -> None:
    from rushhour.audit.summary import OUTCOME_CLASSES, POLICY_DROP_CLASSES, UNSERVED_CLASSES

    assert OUTCOME_CLASSES[-3:] == ("unfinished", "unclassified", "not_sent")
    assert set(UNSERVED_CLASSES) == set(OUTCOME_CLASSES) - {"served", "not_sent"}
    assert set(POLICY_DROP_CLASSES) < set(UNSERVED_CLASSES) and "rate_limited" in POLICY_DROP_CLASSES
