"""Fallback testbeds, calibration plan and SMG header reasons: the pieces without a network."""

from __future__ import annotations

import pytest

from rushhour.audit.classify import classify_one
from rushhour.loadgen.engine.context import build_routes
from rushhour.loadgen.engine.wire.client import _header_reason
from rushhour.loadgen.probes import probe_plan
from rushhour.loadgen.testbed_proc import route_file_name
from rushhour.loadgen.testbed_proc import testbed_config as make_config
from rushhour.scenarios import parse_scenario

SCENARIO = """
name: unit-fallback
target:
  url: testbed
  testbed: {preset: tiny, replicas: 2, faults: [{kind: replica_down, at_s: 5}]}
tiers: [{name: interactive, priority: 100}, {name: batch, priority: -1}]
personas: [{kind: chat, name: c, tier: interactive, arrival: {process: poisson, rate: 1}}]
resilience:
  fallback:
    - {name: standby, url: testbed, profile: vllm, model: small, testbed: {preset: tiny, speed: 0.5}}
    - {name: hosted, url: "https://api.example.com", profile: openai}
calibration: {probes: %d, prompt_tokens: [64, 512]}
"""


def test_each_testbed_route_gets_its_own_config_and_url() -> None:
    scenario = parse_scenario(SCENARIO % 2)
    primary = make_config(scenario)
    standby = make_config(scenario, scenario.resilience.fallback[0], with_faults=False)
    assert primary["replicas"] == 2 and primary["faults"] and primary["profile"] == "llm-d"
    assert standby["profile"] == "vllm" and standby["speed"] == 0.5 and standby["models"] == ["small"]
    assert "faults" not in standby and standby["flow_control"]["objectives"] == {"interactive": 100, "batch": -1}
    assert route_file_name("stand by/2") == "stand_by_2"
    urls = {"primary": "http://127.0.0.1:1001", "standby": "http://127.0.0.1:1002"}
    routes = build_routes(scenario, urls["primary"], testbed_url=urls["primary"], route_urls=urls)
    assert [(r.name, r.url) for r in routes] == [
        ("primary", "http://127.0.0.1:1001"),
        ("standby", "http://127.0.0.1:1002"),
        ("hosted", "https://api.example.com"),
    ]
    # without route URLs (a Locust started by hand) a testbed route uses the given testbed
    assert build_routes(scenario, urls["primary"], testbed_url=urls["primary"])[1].url == urls["primary"]


def test_calibration_plan() -> None:
    assert probe_plan(parse_scenario(SCENARIO % 2)) == [64, 64, 512, 512]
    assert probe_plan(parse_scenario(SCENARIO % 0)) == []


@pytest.mark.parametrize(
    ("headers", "reason", "status", "cls"),
    [
        ({"x-smg-preempted": "true", "retry-after": "1"}, "preempted", 503, "preempted"),
        ({"x-smg-preempted": "True"}, "preempted", 503, "preempted"),
        ({"x-smg-error-code": "scheduler_queue_full"}, "scheduler_queue_full", 429, "queue_full"),
        ({"x-smg-error-code": "scheduler_queue_timeout"}, "scheduler_queue_timeout", 408, "queue_timeout"),
        ({"x-smg-preempted": "false"}, None, 503, "unclassified"),  # a bare 503: no rule, named (TAXONOMY.md)
        ({"x-llm-d-request-dropped-reason": "rejected-saturated"}, "rejected-saturated", 429, None),
    ],
)
def test_smg_header_facts_become_the_reason(
    headers: dict[str, str], reason: str | None, status: int, cls: str | None
) -> None:
    assert _header_reason(headers) == reason
    if cls is not None:
        # a generic body error text must not hide the header's verdict
        got = classify_one("smg", status=status, reason=_header_reason(headers), error="Service Unavailable")
        assert got == cls
