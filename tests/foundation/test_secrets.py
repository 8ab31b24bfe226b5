"""Literal secrets are refused in a scenario; echoed keys are redacted whole, without prefix and in part."""

from __future__ import annotations

import pytest

from rushhour.loadgen.tiers import TierError, map_tier
from rushhour.records.record import redact, register_secret
from rushhour.scenarios import ScenarioError, parse_scenario

BASE = """\
name: t
tiers:
  - name: a
    {extra}
personas: [{{kind: chat, name: c, tier: a, arrival: {{rate: 1}}}}]
"""


@pytest.mark.parametrize(
    "extra",
    [
        "headers: {Authorization: 'Bearer abcdefgh12345678'}",
        "headers: {authorization: 'Basic dXNlcjpwYXNzd29yZA=='}",
        "headers: {x-api-key: 'sk-ant-api03-abcdefghijklmnop'}",
        "headers: {api-key: 'hunter2'}",
        "headers: {x-custom: 'sk-abcdefghijklmnopqrstuvwx'}",
        "headers: {x-custom: 'a8f5f167f44f4964e6c998dee827110c'}",
        "headers: {x-custom: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig'}",
        "body: {api_key: 'hunter2'}",
        "credential: 'sk-abcdefghijklmnopqrstuvwx'",
        "credential: 'env:'",
    ],
)
def test_literal_secrets_are_refused(extra: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(BASE.format(extra=extra), "s.yaml")
    text = str(info.value)
    assert "env:VARIABLE" in text
    for secret in ("abcdefgh12345678", "hunter2", "abcdefghijklmnop", "a8f5f167f44f", "dXNlcjpw"):
        assert secret not in text  # the error itself never repeats the secret


@pytest.mark.parametrize(
    "extra",
    ["headers: {x-api-key: 'env:MY_KEY'}", "headers: {x-request-source: batch-pipeline}",
     "headers: {x-llm-d-inference-objective: interactive}", "body: {max_tokens: 64}",
     "headers: {x-max-tokens: '100'}"],
)
def test_named_secrets_and_plain_headers_pass(extra: str) -> None:
    parse_scenario(BASE.format(extra=extra), "s.yaml")


def test_a_fallback_route_credential_is_env_only() -> None:
    text = BASE.format(extra="") + "resilience: {fallback: [{name: b, url: 'http://127.0.0.1:1', credential: sk-x}]}\n"
    with pytest.raises(ScenarioError, match="env:VARIABLE"):
        parse_scenario(text, "s.yaml")


def test_env_headers_are_read_at_run_time_and_redacted() -> None:
    scenario = parse_scenario(BASE.format(extra="headers: {x-api-key: 'env:RH_HDR'}"), "s.yaml")
    secret = "Qw3rTy7uIo0pAs5dFg9hJk2lZx"
    wire = map_tier(scenario.tiers[0], "a-t0", "openai", "openai-chat", env={"RH_HDR": secret})
    assert wire.headers["x-api-key"] == secret
    assert redact(f"you sent {secret[4:18]}!") == "you sent [redacted]!"
    with pytest.raises(TierError, match="RH_HDR"):
        map_tier(scenario.tiers[0], "a-t0", "openai", "openai-chat", env={})


def test_an_echo_without_prefix_or_in_part_is_redacted() -> None:
    key = "sk-proj-Mn4Bv7Cx1Za8Sd5Fg2Hj9Kl6Pq3"
    register_secret(key)
    core = key.removeprefix("sk-proj-")
    for text in (f"bad key {key}", f"bad key {core}", f"prefix {core[:12]}", f"middle {core[5:19]}x",
                 f"Bearer {key}", f"cut off at the end: {core[:13]}"):
        out = redact(text) or ""
        assert "[redacted]" in out, text
        assert core[:12] not in out and core[5:17] not in out, out
    assert redact("short 1Za8Sd5Fg") == "short 1Za8Sd5Fg"  # under 12 characters: not an echo


@pytest.mark.parametrize(
    "text, kept",
    [
        ("GET /v1?api_key=abcd1234&x=1", "GET /v1?api_key=[redacted]&x=1"),
        ("key=hunter22 rejected", "key=[redacted] rejected"),
        ('{"token": "abcdefgh"}', '{"token": "[redacted]"}'),
        ("access_token=zzzzzzzz", "access_token=[redacted]"),
        ("Authorization: Basic dXNlcjpw", "Authorization: [redacted]"),
        ("max_tokens=4096 is more than the context", "max_tokens=4096 is more than the context"),
        ("prompt_tokens: 5000", "prompt_tokens: 5000"),
    ],
)
def test_key_value_patterns_are_redacted(text: str, kept: str) -> None:
    assert redact(text) == kept


def test_a_refused_value_is_never_echoed_in_a_validation_error() -> None:
    """pydantic's error text quotes the rejected input: a URL with a key in it must not come back in the error."""
    import pytest as _pytest

    from rushhour.loadgen.prepare import RunOptions, apply_overrides
    from rushhour.scenarios import ScenarioError, load_scenario
    from rushhour.scenarios.loader import validate_data

    with _pytest.raises(ScenarioError) as caught:
        apply_overrides(load_scenario("demo"), RunOptions(target="http://user:sk-live-secret-0123@gw:80"))
    assert "user or password" in str(caught.value) and "sk-live-secret" not in str(caught.value)
    with _pytest.raises(ScenarioError) as caught:
        validate_data({"name": "x", "target": {"url": "http://u:sk-live-secret-9@h"},
                       "tiers": [{"name": "a", "credential": "sk-live-secret-8"}]}, "x")
    assert "sk-live-secret" not in str(caught.value) and "sk-live-secret" not in repr(caught.value.problems)
