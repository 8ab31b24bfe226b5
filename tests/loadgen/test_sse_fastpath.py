"""The interpreter's fast path (one loop, byte searches, batched tokens) against its general path.

``StreamInterpreter.feed`` handles the common events inline; ``SSESplitter`` + ``_event`` is the
general path, kept as the reference. Every fact the record takes from a stream must be the same
whichever path saw it, at every chunking of the bytes.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from rushhour.loadgen.engine.wire.stream import ANTHROPIC, OPENAI_CHAT, OPENAI_COMPLETIONS, StreamInterpreter

FACTS = (
    "tokens",
    "first_token_ns",
    "last_token_ns",
    "itl_max_ns",
    "itl_mean_ns",
    "token_ns",
    "complete",
    "in_band_error",
    "reason",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "service_tier",
    "events",
    "malformed",
    "malformed_text",
    "pending",
)


def sse(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


CHAT = b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"word "}}],"usage":null}'
ROLE = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
SPACED = b'{"choices": [{"delta": {"content" : "x"}}]}'
REASONING = b'{"choices":[{"delta":{"content":"","reasoning_content":"think"}}]}'
ESCAPED = b'{"choices":[{"delta":{"content":"say \\"content\\":\\"x\\" and \\"usage\\":{} \\"error\\": 1"}}]}'
FINISH = b'{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}'
USAGE = (
    b'{"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":3,'
    b'"prompt_tokens_details":{"cached_tokens":8}},"service_tier":"default"}'
)
TIER = b'{"choices":[{"delta":{"content":"a"}}],"service_tier":"flex"}'
SGLANG_ERROR = b'{"error":{"message":"queue full","type":"overloaded","code":503}}'
OBJECT_ERROR = b'{"object":"error","message":"bad","type":"invalid_request_error","code":400}'
CONTENT_AND_ERROR = b'{"choices":[{"delta":{"content":"z"}}],"error":{"code":"boom"}}'

OPENAI_STREAMS = {
    "plain": sse(ROLE, CHAT, CHAT, CHAT, FINISH, USAGE, b"[DONE]"),
    "spaced-reasoning-escaped": sse(ROLE, SPACED, REASONING, ESCAPED, CHAT, b"[DONE]"),
    "tier": sse(TIER, CHAT, b"[DONE]"),
    "sglang-error": sse(CHAT, SGLANG_ERROR, b"[DONE]"),
    "object-error": sse(OBJECT_ERROR),
    "content-and-error": sse(CONTENT_AND_ERROR, CHAT),
    "garbage": sse(CHAT, b"oops", b"{broken", b"", CHAT) + b"data: [DONE]\n\n",
    "comments-named-multiline": (
        b": keep-alive\n\n" + sse(CHAT) + b"event: error\ndata: " + SGLANG_ERROR + b"\n\n"
        b'data: {"choices":[{"delta":\ndata: {"content":"m"}}]}\n\n'
        + b"id: 7\nretry: 10\n\n"
        + sse(CHAT)
        + b"bogus line\n\n"
        + b"event: content_block_delta\ndata: "
        + CHAT
        + b"\n\n"
    ),
    "crlf": sse(ROLE, CHAT, CHAT).replace(b"\n", b"\r\n") + sse(CHAT, b"[DONE]"),
    "cr-only-after-lf": sse(CHAT, CHAT) + b"data: " + CHAT + b"\r\r" + sse(USAGE),
    "truncated": sse(CHAT, CHAT) + b"data: " + CHAT[:20],
}

COMPLETIONS = sse(
    b'{"choices":[{"text":"a"}]}', b'{"choices":[{"text":""}]}', b'{"choices":[{"text" : "b"}]}', USAGE, b"[DONE]"
)


def anthropic(events: list[tuple[bytes | None, bytes]]) -> bytes:
    return b"".join((b"event: " + n + b"\n" if n else b"") + b"data: " + d + b"\n\n" for n, d in events)


DELTA = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word "}}'
START = (
    b'{"type":"message_start","message":{"usage":{"input_tokens":5,"cache_read_input_tokens":7,'
    b'"cache_creation_input_tokens":1,"output_tokens":1,"service_tier":"standard"}}}'
)
ANTHROPIC_EVENTS: list[tuple[bytes | None, bytes]] = [
    (b"message_start", START),
    (b"content_block_start", b'{"type":"content_block_start","index":0}'),
    (b"ping", b'{"type":"ping"}'),
    (b"content_block_delta", DELTA),
    (b"content_block_delta", DELTA),
    (b"content_block_delta", DELTA),
    (b"content_block_stop", b'{"type":"content_block_stop","index":0}'),
    (b"message_delta", b'{"type":"message_delta","usage":{"output_tokens":3}}'),
    (b"message_stop", b'{"type":"message_stop"}'),
]
ANTHROPIC_STREAMS = {
    "named": anthropic(ANTHROPIC_EVENTS),
    "unnamed": anthropic([(None, d) for _, d in ANTHROPIC_EVENTS]),
    "error": anthropic([*ANTHROPIC_EVENTS[:4], (b"error", b'{"type":"error","error":{"type":"overloaded_error"}}')]),
    "crlf": anthropic(ANTHROPIC_EVENTS).replace(b"\n", b"\r\n"),
}

CASES = (
    [(OPENAI_CHAT, k, v) for k, v in OPENAI_STREAMS.items()]
    + [(OPENAI_COMPLETIONS, "completions", COMPLETIONS)]
    + [(ANTHROPIC, k, v) for k, v in ANTHROPIC_STREAMS.items()]
)


def facts(interp: StreamInterpreter) -> dict[str, Any]:
    return {name: getattr(interp, name) for name in FACTS}


def chunks(data: bytes, rng: random.Random, max_size: int) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, max_size)
        out.append(data[i : i + n])
        i += n
    return out


def reference(dialect: str, pieces: list[bytes]) -> StreamInterpreter:
    """The general path only: the splitter, then one ``_event`` per event (as before the fast path)."""
    interp = StreamInterpreter(dialect, record_token_times=True)
    for t, piece in enumerate(pieces):
        for name, data in interp._sse.feed(piece):
            interp.events += 1
            interp._event(name, data, 1_000 + 1_000 * t)
    return interp


def fast(dialect: str, pieces: list[bytes]) -> StreamInterpreter:
    interp = StreamInterpreter(dialect, record_token_times=True)
    for t, piece in enumerate(pieces):
        interp.feed(piece, 1_000 + 1_000 * t)
    return interp


@pytest.mark.parametrize(("dialect", "name", "data"), CASES, ids=[c[1] + "-" + c[0] for c in CASES])
def test_fast_path_matches_general_path_at_every_chunking(dialect: str, name: str, data: bytes) -> None:
    rng = random.Random(name)
    splits = [[data], [data[i : i + 1] for i in range(len(data))]]
    splits += [chunks(data, rng, size) for size in (3, 17, 64, 300) for _ in range(5)]
    for pieces in splits:
        assert facts(fast(dialect, pieces)) == facts(reference(dialect, pieces)), pieces


def test_every_single_cut_of_the_plain_stream() -> None:
    data = OPENAI_STREAMS["plain"] + OPENAI_STREAMS["comments-named-multiline"]
    for cut in range(1, len(data)):
        pieces = [data[:cut], data[cut:]]
        assert facts(fast(OPENAI_CHAT, pieces)) == facts(reference(OPENAI_CHAT, pieces))


def test_plain_stream_facts() -> None:
    interp = fast(OPENAI_CHAT, [OPENAI_STREAMS["plain"]])
    assert (interp.tokens, interp.complete, interp.itl_max_ns, interp.itl_mean_ns) == (3, True, 0, 0)
    assert (interp.prompt_tokens, interp.output_tokens, interp.cached_tokens, interp.service_tier) == (
        11,
        3,
        8,
        "default",
    )
    assert interp.token_ns == [1_000, 1_000, 1_000]


def test_tokens_in_one_read_share_its_time_and_the_gap_is_to_the_previous_read() -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(sse(CHAT), 100)
    interp.feed(sse(CHAT, CHAT, CHAT), 400)
    interp.feed(sse(CHAT), 1_000)
    assert (interp.tokens, interp.first_token_ns, interp.last_token_ns) == (5, 100, 1_000)
    assert interp.itl_max_ns == 600
    assert interp.itl_mean_ns == (300 + 0 + 0 + 600) // 4


def test_errors_usage_and_tier_are_still_seen_on_the_fast_path() -> None:
    interp = fast(OPENAI_CHAT, [OPENAI_STREAMS["sglang-error"]])
    assert interp.in_band_error == "queue full" and interp.reason == "overloaded" and interp.tokens == 1
    assert interp.complete
    interp = fast(OPENAI_CHAT, [OPENAI_STREAMS["tier"]])
    assert interp.service_tier == "flex" and interp.tokens == 2
    # text that merely quotes the keys is content, not usage / an error
    interp = fast(OPENAI_CHAT, [sse(ESCAPED, b"[DONE]")])
    assert (interp.tokens, interp.in_band_error, interp.prompt_tokens, interp.unparsable) == (1, None, None, 0)


def test_not_an_event_stream_keeps_the_start_of_the_body() -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    page = b"<html>" + b"x" * 1000 + b"</html>"
    for i in range(0, len(page), 100):
        interp.feed(page[i : i + 100], i)
    assert interp.events == 0 and bytes(interp.head) == page[:512]
