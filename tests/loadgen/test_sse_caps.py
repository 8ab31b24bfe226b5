"""Long SSE events: parsed right across many reads (the held part is not re-scanned), refused past 1 MiB."""

from __future__ import annotations

import pytest

from rushhour.loadgen.engine.wire.http import ResponseTooLarge
from rushhour.loadgen.engine.wire.sse import EVENT_TOO_LARGE, MAX_EVENT_BYTES, SSESplitter
from rushhour.loadgen.engine.wire.stream import OPENAI_CHAT, StreamInterpreter

CHUNK = b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n'


def _long_event(size: int, crlf: bool = False) -> bytes:
    nl = b"\r\n" if crlf else b"\n"
    return b'data: {"choices":[{"delta":{"content":"' + b"x" * size + b'"}}]}' + nl + nl


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("piece", [1000, 4096, 65536])
def test_long_event_across_many_reads(crlf: bool, piece: int) -> None:
    """A 600 KiB event then normal ones: every event counted once, whatever the read size."""
    data = CHUNK + _long_event(600_000, crlf) + CHUNK * 3 + b"data: [DONE]\n\n"
    interp = StreamInterpreter(OPENAI_CHAT)
    for i, part in enumerate(_pieces(data, piece)):
        interp.feed(part, i)
    assert interp.tokens == 5 and interp.complete and interp.events == 6 and interp.pending == b""


def test_event_end_split_between_the_held_part_and_the_next_read() -> None:
    """The blank line's two newlines in two reads, after a held part past the re-scan limit."""
    event = _long_event(20_000)
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(event[:-1], 1)  # ends with the first \n
    interp.feed(event[-1:] + CHUNK, 2)
    assert interp.tokens == 2 and interp.events == 2 and interp.pending == b""


@pytest.mark.parametrize("crlf", [False, True])
def test_event_over_the_cap_is_refused(crlf: bool) -> None:
    interp = StreamInterpreter(OPENAI_CHAT)
    interp.feed(CHUNK, 0)
    body = b"data: {" + b"x" * 65536
    if crlf:
        body = b"\r\n" + body  # a CR anywhere sends the stream through the general splitter
    with pytest.raises(ResponseTooLarge, match=EVENT_TOO_LARGE):
        interp.feed(body, 1)
        for i in range(MAX_EVENT_BYTES // 65536 + 1):
            interp.feed(b"y" * 65536, 2 + i)
    assert interp.tokens == 1  # what came before the flood is kept


def test_splitter_cap_and_pending() -> None:
    sse = SSESplitter()
    assert sse.feed(b"data: a\r") == []
    assert sse.pending == b"data: a\r"  # a CR held back: maybe half a CRLF
    assert sse.feed(b"\n\r\n") == [(None, b"a")]
    with pytest.raises(ResponseTooLarge):
        for _ in range(MAX_EVENT_BYTES // 4096 + 2):
            sse.feed(b"z" * 4096)
