"""SSE framing and per-dialect stream interpretation, fed across arbitrary chunk boundaries."""

from __future__ import annotations

import random

import pytest

from rushhour.loadgen.engine.wire.sse import SSESplitter
from rushhour.loadgen.engine.wire.stream import ANTHROPIC, OPENAI_CHAT, OPENAI_COMPLETIONS, StreamInterpreter

CHUNK = b'{"choices":[{"index":0,"delta":{"content":"hi"}}]}'
ROLE = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
USAGE = (
    b'{"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":3,'
    b'"prompt_tokens_details":{"cached_tokens":8}},"service_tier":"default"}'
)
OPENAI_STREAM = b"".join(b"data: " + p + b"\n\n" for p in (ROLE, CHUNK, CHUNK, CHUNK, USAGE, b"[DONE]"))


def feed_split(interp: StreamInterpreter, data: bytes, rng: random.Random) -> None:
    i, t = 0, 1000
    while i < len(data):
        n = rng.randint(1, 9)
        interp.feed(data[i : i + n], t)
        i += n
        t += 1000


def test_splitter_handles_every_boundary() -> None:
    whole = SSESplitter().feed(OPENAI_STREAM)
    for cut in range(1, len(OPENAI_STREAM)):
        s = SSESplitter()
        assert s.feed(OPENAI_STREAM[:cut]) + s.feed(OPENAI_STREAM[cut:]) == whole


def test_splitter_crlf_multiline_comments_and_names() -> None:
    data = b": keepalive\r\n\r\nevent: x\r\ndata: a\r\ndata: b\r\nid: 3\r\n\r\ndata:c\n\n"
    for cut in range(1, len(data)):
        s = SSESplitter()
        assert s.feed(data[:cut]) + s.feed(data[cut:]) == [(b"x", b"a\nb"), (None, b"c")]


def test_splitter_keeps_pending_and_counts_malformed() -> None:
    s = SSESplitter()
    assert s.feed(b"bogus line\n\ndata: x") == []
    assert s.malformed == 1
    assert s.pending == b"data: x"


@pytest.mark.parametrize("seed", range(20))
def test_openai_chat_stream_random_chunks(seed: int) -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    feed_split(interp, OPENAI_STREAM, random.Random(seed))
    assert interp.complete
    assert interp.tokens == 3  # the empty role delta is not a token
    assert (interp.prompt_tokens, interp.output_tokens, interp.cached_tokens) == (11, 3, 8)
    assert interp.service_tier == "default"
    assert interp.first_token_ns is not None and interp.last_token_ns is not None
    assert interp.first_token_ns < interp.last_token_ns
    assert interp.itl_max_ns is not None and interp.itl_mean_ns is not None
    assert interp.in_band_error is None and interp.malformed == 0


def test_token_times_recorded_when_asked() -> None:
    interp = StreamInterpreter(OPENAI_CHAT, record_token_times=True)
    interp.feed(OPENAI_STREAM, 5)
    assert interp.token_ns == [5, 5, 5]


def test_spaces_in_json_and_reasoning_content() -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(
        b'data: {"choices": [{"delta": {"reasoning_content": "x"}}]}\n\n'
        b'data: {"choices": [{"delta": {"content": "y"}}]}\n\n'
        b'data: {"choices": [{"delta": {"content": null}}]}\n\n',
        1,
    )
    assert interp.tokens == 2


def test_tool_call_argument_fragments_are_tokens() -> None:
    # vLLM/OpenAI stream a tool call as argument fragments with no content: each is an output token
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(
        b'data: {"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"c1",'
        b'"type":"function","function":{"name":"read_file","arguments":""}}]}}]}\n\n'
        b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"path\\": "}}]}}]}\n\n'
        b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"a.py\\"}"}}]}}]}\n\n',
        7,
    )
    assert interp.tokens == 2 and interp.first_token_ns == 7


def test_escaped_content_inside_text_is_not_a_second_token() -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(b'data: {"choices":[{"delta":{"content":"say \\"content\\": \\"x\\""}}]}\n\n', 1)
    assert interp.tokens == 1


def test_completions_dialect() -> None:
    interp = StreamInterpreter(OPENAI_COMPLETIONS)
    interp.feed(b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":""}]}\n\ndata: [DONE]\n\n', 1)
    assert interp.tokens == 1 and interp.complete


def test_sglang_in_band_error_inside_200() -> None:
    err = (
        b'{"error":{"object":"error","message":"Request waiting timeout reached.",'
        b'"type":"SERVICE_UNAVAILABLE","param":null,"code":503}}'
    )
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(b"data: " + CHUNK + b"\n\ndata: " + err + b"\n\ndata: [DONE]\n\n", 1)
    assert interp.in_band_error == "Request waiting timeout reached."
    assert interp.reason == "SERVICE_UNAVAILABLE"
    assert interp.complete  # the end marker came: completeness is a fact, failure is the audit's call


def test_openai_responses_style_error_event() -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(
        b'event: error\ndata: {"type":"error","error":{"type":"service_unavailable_error",'
        b'"code":"server_is_overloaded","message":"overloaded"}}\n\n',
        1,
    )
    assert interp.in_band_error == "overloaded"
    assert interp.reason == "server_is_overloaded"


ANTHROPIC_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":5,'
    b'"cache_read_input_tokens":20,"service_tier":"standard"}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"b"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


@pytest.mark.parametrize("seed", range(10))
def test_anthropic_stream(seed: int) -> None:
    interp = StreamInterpreter(ANTHROPIC)
    feed_split(interp, ANTHROPIC_STREAM, random.Random(seed))
    assert interp.complete and interp.tokens == 2
    assert (interp.prompt_tokens, interp.cached_tokens, interp.output_tokens) == (25, 20, 2)
    assert interp.service_tier == "standard"


def test_anthropic_error_event() -> None:
    interp = StreamInterpreter(ANTHROPIC)
    interp.feed(
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n', 1
    )
    assert interp.in_band_error == "Overloaded" and interp.reason == "overloaded_error"
    assert not interp.complete


def test_anthropic_without_event_lines() -> None:
    interp = StreamInterpreter(ANTHROPIC)
    interp.feed(b'data: {"type":"content_block_delta","delta":{"text":"a"}}\n\ndata: {"type":"message_stop"}\n\n', 1)
    assert interp.tokens == 1 and interp.complete


def test_malformed_events_are_counted_not_fatal() -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(b"data: " + CHUNK + b"\n\ndata: {broken\n\ndata: <html>\n\nnonsense\n\ndata: [DONE]\n\n", 1)
    assert interp.tokens == 1 and interp.complete
    assert interp.malformed == 3
    assert interp.malformed_text is not None and "malformed" in interp.malformed_text
    assert interp.in_band_error is None


def test_truncated_stream_is_not_complete() -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(b"data: " + CHUNK + b"\n\ndata: " + CHUNK[:10], 1)
    assert interp.tokens == 1 and not interp.complete and interp.pending
