"""audit/otlp.py's pure parts: what a span says of an attempt, and an endpoint shown without its credentials."""

from __future__ import annotations

from rushhour.audit.otlp import shown_endpoint, signal_urls, span_attributes


def test_an_endpoint_is_shown_without_userinfo_or_query() -> None:
    assert shown_endpoint("https://alice:s3cret@otel.example:4318/base?token=abc#x") == "https://otel.example:4318/base"
    assert "s3cret" not in shown_endpoint("http://:s3cret@127.0.0.1:4318")
    assert signal_urls("http://127.0.0.1:4318/") == ("http://127.0.0.1:4318/v1/traces",
                                                     "http://127.0.0.1:4318/v1/metrics")
    assert signal_urls(None) == (None, None)  # the SDK's OTEL_EXPORTER_OTLP_* variables decide


def test_a_served_attempts_attributes_carry_its_timings_and_tokens_and_nothing_else() -> None:
    record = {"kind": "request", "tier": "interactive", "persona": "chat", "route": "primary", "attempt": 2,
              "request_id": "ab" * 16, "logical_id": "cd" * 16, "model": "m", "status": 200, "intended_ns": 0,
              "sent_ns": 1_000_000, "first_token_ns": 251_000_000, "done_ns": 1_001_000_000, "tokens": 9,
              "prompt_tokens": None, "prompt_tokens_intended": 64, "output_tokens": 10, "gateway_queue_ms": 12.5,
              "metrics_queue_time_ms": None, "error": None, "endpoint": "http://user:key@host/v1", "tenant": "t-1"}
    attrs = span_attributes(record, "served")
    assert attrs["rushhour.class"] == "served" and attrs["rushhour.attempt"] == 2
    assert attrs["rushhour.ttft_s"] == 0.25 and attrs["rushhour.e2e_s"] == 1.0 and attrs["rushhour.send_lag_s"] == 0.001
    assert attrs["gen_ai.usage.input_tokens"] == 64 and attrs["gen_ai.usage.output_tokens"] == 10
    assert attrs["rushhour.gateway_queue_ms"] == 12.5 and "rushhour.server_queue_ms" not in attrs
    assert "key" not in repr(attrs) and "t-1" not in repr(attrs)  # neither the endpoint nor the tenant travels
    cut = span_attributes({**record, "status": 0, "first_token_ns": None, "done_ns": None, "attempt": True},
                          "failed")
    assert "http.response.status_code" not in cut and "rushhour.ttft_s" not in cut and cut["rushhour.attempt"] == 1
