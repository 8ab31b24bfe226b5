"""The stack-profile registry: one module per stack, every rule valid, names and look-ups consistent."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from rushhour import stacks
from rushhour.audit.classify import classify_one
from rushhour.audit.summary import OUTCOME_CLASSES
from rushhour.stacks import Rule, StackProfile

STACKS_DIR = Path(stacks.__file__).parent


@pytest.mark.parametrize("profile", stacks.STACKS, ids=lambda p: p.name)
def test_every_rule_parses_and_names_a_known_class(profile: StackProfile) -> None:
    assert profile.rules, f"{profile.name} has no rules"
    for rule in profile.rules:
        if rule.pattern is not None:
            re.compile(rule.pattern, re.IGNORECASE)
        assert rule.cls in OUTCOME_CLASSES, (profile.name, rule)
        assert rule.note, f"{profile.name}: rule {rule.pattern!r} cites no source"
    for status, cls in profile.status_defaults.items():
        assert 100 <= status <= 599
        assert cls in OUTCOME_CLASSES


def test_names_aliases_and_testbed_imitations() -> None:
    assert stacks.NAMES[:8] == ("llm-d", "gaie-v1", "vllm", "sglang", "openai", "anthropic", "smg", "litellm")
    assert {"testbed", "fifo", "headroom"} <= set(stacks.NAMES)
    for alias in ("testbed", "fifo", "headroom", "TESTBED"):
        assert stacks.get(alias).name == "llm-d"
    assert stacks.testbed_profile("testbed") == "llm-d"
    assert stacks.testbed_profile("fifo") == "fifo"
    assert stacks.testbed_profile("headroom") == "headroom"
    assert stacks.testbed_profile("smg") == "llm-d"
    assert stacks.testbed_profile("litellm") == "litellm"
    with pytest.raises(KeyError, match="unknown stack profile 'nope'"):
        stacks.get("nope")
    with pytest.raises(KeyError):
        stacks.testbed_profile("nope")


def test_scenario_profiles_come_from_the_registry() -> None:
    from rushhour.scenarios.model import PROFILES, Target

    assert PROFILES == stacks.NAMES
    assert Target(profile="litellm").profile == "litellm"
    with pytest.raises(ValueError, match="litellm"):  # the error lists the known names
        Target(profile="lite-llm")


def test_every_stack_module_is_registered_and_imports_only_the_standard_library() -> None:
    import importlib

    infrastructure = {"__init__", "__main__", "profile", "registry", "common", "timing"}  # not stacks
    modules = {p.stem for p in STACKS_DIR.glob("*.py")} - infrastructure
    for name in modules:
        profile = importlib.import_module(f"rushhour.stacks.{name}").PROFILE
        assert isinstance(profile, StackProfile)
        assert any(p is profile for p in stacks.STACKS), f"stacks/{name}.py is not in stacks.registry.STACKS"
    assert len(stacks.STACKS) == len(modules)
    stdlib = set(sys.stdlib_module_names) | {"__future__", "stacks"}

    def root(name: str) -> str:  # rushhour.stacks.x is the package itself; rushhour.anything_else is not
        return "stacks" if name == "rushhour.stacks" or name.startswith("rushhour.stacks.") else name.split(".")[0]

    for path in STACKS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {root(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                roots = ({root(f"rushhour.{a.name}") for a in node.names} if module == "rushhour" and not node.level
                         else {root(module)})
            else:
                continue
            assert roots <= stdlib, f"{path.name} imports {roots - stdlib}"


def test_rule_rejects_a_bad_pattern_and_a_bad_class() -> None:
    with pytest.raises(ValueError, match="bad pattern"):
        Rule("queue_full", r"(unclosed")
    with pytest.raises(ValueError, match="bad class"):
        Rule("Queue Full", r"x")


def test_header_reasons() -> None:
    assert stacks.header_reason({"x-llm-d-request-dropped-reason": "rejected-saturated"}, 429) == "rejected-saturated"
    assert stacks.header_reason({"x-smg-error-code": "scheduler_queue_full"}, 429) == "scheduler_queue_full"
    assert stacks.header_reason({"x-smg-preempted": "true"}, 503) == "preempted"
    assert stacks.header_reason({"x-smg-preempted": "true", "x-smg-error-code": "x"}, 503) == "preempted x"
    litellm_429 = {"rate_limit_type": "requests", "retry-after": "60", "x-ratelimit-api_key-remaining-requests": "0",
                   "x-ratelimit-api_key-limit-requests": "5", "x-ratelimit-remaining-tokens": "900"}
    assert stacks.header_reason(litellm_429, 429) == "rate_limit_type=requests x-ratelimit-api_key-remaining-requests=0"
    v1 = {"x-ratelimit-remaining-requests": "0", "x-litellm-call-id": "c1"}
    assert stacks.header_reason(v1, 429) == "x-ratelimit-remaining-requests=0"
    # OpenAI's own 429 has x-ratelimit-* too: its body's error code stays the reason
    assert stacks.header_reason({"x-ratelimit-remaining-requests": "0"}, 429) is None
    # on a success the same headers are bookkeeping, not a reason
    assert stacks.header_reason(litellm_429, 200) is None
    assert stacks.header_reason({"content-type": "text/plain"}, 503) is None


def test_wire_mappings() -> None:
    assert stacks.get("llm-d").wire.objective_header == "x-llm-d-inference-objective"
    assert stacks.get("gaie-v1").wire.fairness_header == "x-gateway-inference-fairness-id"
    assert stacks.get("vllm").wire.priority_body == "negated"
    assert stacks.get("sglang").wire.priority_body == "as_is"
    assert stacks.get("smg").wire.priority_header == "x-smg-priority"
    assert stacks.get("openai").wire.service_tier and stacks.get("anthropic").wire.anthropic_auth
    # tiers travel as per-tier keys; priority for LiteLLM's scheduler and, in extra_body, for a vLLM behind it
    litellm = stacks.get("litellm").wire
    assert litellm.priority_body == litellm.priority_extra_body == "negated"


def test_metric_selection() -> None:
    vllm = stacks.get("vllm").metrics
    assert vllm.keeps("vllm:admission_rejections_total") and vllm.keeps("vllm:request_success_total")
    assert not vllm.keeps("python_gc_objects_collected_total")
    litellm = stacks.get("litellm").metrics
    assert litellm.keeps("litellm_proxy_total_requests_metric_total") and not litellm.keeps("vllm:x")
    # a real LiteLLM 1.106.12 page: 659 samples, most of them per-series ``_created`` timestamps
    assert not litellm.keeps("litellm_proxy_total_requests_metric_created")
    assert not litellm.keeps("litellm_spend_metric_total")
    llmd = stacks.get("testbed").metrics
    assert llmd.keeps("llm_d_epp_flow_control_requests_total") and llmd.keeps("testbed_step_lag_seconds")


# Every rule added for vLLM 0.32 and LiteLLM, with the facts the loadgen records (reason, error, in-band).
BUSY = "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance."
BACKLOG = "The engine has reached its prefill token backlog limit. Please try again later or on a different instance."
CASES = [
    ("vllm", 503, "Service Unavailable", BUSY, None, "queue_full"),
    ("vllm", 503, "Service Unavailable", BACKLOG, None, "queue_full"),
    ("vllm", 200, "Service Unavailable", None, BUSY, "queue_full"),
    ("vllm", 200, "Service Unavailable", None, BACKLOG, "queue_full"),
    ("vllm", 503, None, "The model is currently scaling. Please try again later.", None, "overloaded"),
    ("vllm", 503, "ServiceUnavailableError", "Request failed; please retry", None, "failed"),
    ("sglang", 503, "Service Unavailable", BUSY, None, "queue_full"),
    ("litellm", 429, "429", "litellm.RateLimitError: Deployment has all max_parallel_requests slots in use. "
     "Deployment model_group=tiny", None, "queue_full"),
    ("litellm", 429, "429", "Max parallel request limit reached Hit Global Limit: Limit=10, current: 10", None,
     "queue_full"),
    ("litellm", 429, "429", "litellm.RateLimitError: No deployments available for selected model, Try again in 5 "
     "seconds. All deployments for selected model are in cooldown.", None, "overloaded"),
    ("litellm", 429, "429", "You passed in model=tiny. There are no healthy deployments for this model", None,
     "overloaded"),
    ("litellm", 429, "429", "Max parallel request limit reached LiteLLM Rate Limit Handler for rate limit type = key. "
     "Crossed TPM / RPM / Max Parallel Request Limit. current rpm: 5, rpm limit: 5", None, "rate_limited"),
    ("litellm", 429, "rate_limit_type=requests x-ratelimit-api_key-remaining-requests=0",
     "Rate limit exceeded for api_key: 88dc28d0. Limit type: requests. Current limit: 5, Remaining: 0.", None,
     "rate_limited"),
    ("litellm", 429, "rate_limit_type=max_parallel_requests",
     "Rate limit exceeded for team: t1. Limit type: max_parallel_requests.", None, "rate_limited"),
    ("litellm", 429, "429", "litellm.RateLimitError: Deployment over user-defined ratelimit. rpm limit=10. "
     "current usage=10.", None, "rate_limited"),
    ("litellm", 429, "429", "Model rate limit exceeded. RPM limit=10, current usage=11", None, "rate_limited"),
    ("litellm", 429, "rate_limit_type=tokens", "something new", None, "rate_limited"),
    ("litellm", 503, None, "Rate limit enforcement unavailable: request counters could not be verified", None,
     "failed"),
    ("litellm", 401, "401", "Authentication Error, Invalid proxy server token passed.", None, "failed"),
    ("litellm", 503, "503", f"litellm.ServiceUnavailableError: Hosted_vllmException - {BUSY}", None, "queue_full"),
    ("litellm", 200, "503", None, f"Hosted_vllmException - {BACKLOG}", "queue_full"),
]


@pytest.mark.parametrize(("profile", "status", "reason", "error", "in_band", "expected"), CASES)
def test_new_rules(profile: str, status: int, reason: str | None, error: str | None, in_band: str | None,
                   expected: str) -> None:
    assert classify_one(profile, status=status, reason=reason, error=error, in_band_error=in_band) == expected


def test_capacity_429_is_never_quota_on_litellm() -> None:
    """The issue's report: the slots-in-use 429 matched the rate-limit pattern (quota) although it is capacity."""
    text = "litellm.RateLimitError: Deployment has all max_parallel_requests slots in use."
    assert classify_one("litellm", status=429, reason="429", error=text) == "queue_full"


def test_docs_rules_table_is_current() -> None:
    """docs/audit.md shows the rules as the registry has them (regenerate: ``python -m rushhour.stacks rules``)."""
    from rushhour.stacks.__main__ import profiles_markdown, rules_markdown

    root = Path(__file__).resolve().parents[2]
    assert rules_markdown() in (root / "docs" / "audit.md").read_text(), "run `python -m rushhour.stacks rules`"
    assert profiles_markdown() in (root / "docs" / "stacks.md").read_text(), "run `python -m rushhour.stacks profiles`"


def test_common_status_defaults_are_the_registrys() -> None:
    from rushhour.audit.classify import COMMON_STATUS_DEFAULTS
    from rushhour.stacks.common import COMMON_STATUS_DEFAULTS as TABLE

    assert COMMON_STATUS_DEFAULTS == TABLE
    assert 429 not in TABLE and 503 not in TABLE  # a policy on one stack, something else on another


def test_litellm_scheduler_timeout_is_a_queue_timeout() -> None:
    # LiteLLM 1.106.12 scheduler.py wait_for_turn: a prioritised request that waited out the router timeout
    from rushhour.audit.classify import classify_one

    text = "litellm.Timeout: Request timed out while polling queue"
    assert classify_one("litellm", status=408, error=text) == "queue_timeout"
    assert classify_one("litellm", status=408, error="something else") == "unclassified"
