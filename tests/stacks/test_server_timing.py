"""Server timing read as raw, bounded facts: vLLM's ``metrics`` object, LiteLLM's and the testbed's headers."""

from __future__ import annotations

import dataclasses

from rushhour.loadgen.engine.wire.stream import StreamInterpreter, interpret_body
from rushhour.records.record import RequestRecord
from rushhour.stacks import timing
from rushhour.testbed.profiles import GATEWAY_QUEUE_HEADER

USAGE_CHUNK = (b'data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,'
               b'"completion_tokens":3,"total_tokens":6},"metrics":{"queue_time_ms":12.5,'
               b'"time_to_first_token_ms":6.25,"generation_time_ms":10.0,"mean_itl_ms":5.0,'
               b'"tokens_per_second":175.5}}\n\ndata: [DONE]\n\n')


def test_every_timing_field_is_a_record_field() -> None:
    names = {f.name for f in dataclasses.fields(RequestRecord)}
    assert set(timing.FIELDS) <= names
    assert timing.GATEWAY_QUEUE_HEADER == GATEWAY_QUEUE_HEADER  # the testbed sends what the wire reads


def test_metrics_object_in_the_stream_usage_chunk() -> None:
    interp = StreamInterpreter("openai-chat")
    interp.feed(USAGE_CHUNK, 1)
    assert interp.timing == {"metrics_queue_time_ms": 12.5, "metrics_time_to_first_token_ms": 6.25,
                             "metrics_generation_time_ms": 10.0, "metrics_mean_itl_ms": 5.0,
                             "metrics_tokens_per_second": 175.5}
    assert interp.output_tokens == 3


def test_metrics_object_in_a_whole_body() -> None:
    body = b'{"choices":[{"message":{"content":"hi"}}],"usage":{},"metrics":{"queue_time_ms":3}}'
    assert interpret_body("openai-chat", body)["timing"] == {"metrics_queue_time_ms": 3.0}


def test_hostile_values_are_left_out() -> None:
    bad = {"queue_time_ms": -1, "time_to_first_token_ms": float("nan"), "generation_time_ms": 1e12,
           "mean_itl_ms": "5", "tokens_per_second": True, "unknown_ms": 1.0}
    assert timing.from_metrics(bad) == {}
    assert timing.from_metrics([1, 2]) == {}
    assert timing.from_headers({"x-litellm-response-duration-ms": "1" * 40,
                                "x-litellm-overhead-duration-ms": "inf",
                                "x-litellm-timing-llm-api-ms": " 812.5 ",
                                GATEWAY_QUEUE_HEADER: "abc"}) == {"litellm_timing_llm_api_ms": 812.5}


def test_litellm_headers_by_their_source_names() -> None:
    headers = {"x-litellm-response-duration-ms": "900.0", "x-litellm-overhead-duration-ms": "12",
               "x-litellm-timing-pre-processing-ms": "3.5", GATEWAY_QUEUE_HEADER: "40.25"}
    assert timing.from_headers(headers) == {"litellm_response_duration_ms": 900.0,
                                            "litellm_overhead_duration_ms": 12.0,
                                            "litellm_timing_pre_processing_ms": 3.5, "gateway_queue_ms": 40.25}
