"""HTTP request bytes and response parsing (httptools), Retry-After."""

from __future__ import annotations

import httptools
import pytest

from rushhour.loadgen.engine.wire.http import Endpoint, ResponseHead, ResponseParser, build_request, parse_retry_after


def test_endpoint_parse() -> None:
    ep = Endpoint.parse("https://api.example.com/openai/")
    assert (ep.scheme, ep.host, ep.port, ep.base_path, ep.host_header) == (
        "https",
        "api.example.com",
        443,
        "/openai",
        "api.example.com",
    )
    assert Endpoint.parse("http://127.0.0.1:8000").host_header == "127.0.0.1:8000"
    with pytest.raises(ValueError):
        Endpoint.parse("ftp://x")


def test_build_request_shape_and_header_injection() -> None:
    raw = build_request(Endpoint.parse("http://h:1/base"), "/v1/x", {"x-request-id": "abc"}, b"{}")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /base/v1/x HTTP/1.1\r\nHost: h:1\r\n")
    assert b"Content-Length: 2" in head and b"x-request-id: abc" in head and body == b"{}"
    with pytest.raises(ValueError):
        build_request(Endpoint.parse("http://h"), "/", {"x": "a\r\nEvil: 1"}, b"")


def test_parser_chunked_stream_timed_by_arrival() -> None:
    seen: list[tuple[bytes, int]] = []
    heads: list[tuple[ResponseHead, int]] = []
    p = ResponseParser(lambda h, t: heads.append((h, t)), lambda b, t: seen.append((b, t)))
    raw = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n"
        b"X-LLM-D-Request-Dropped-Reason: none\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    p.feed(raw[:40], 1)
    p.feed(raw[40:], 2)
    assert heads[0][0].status == 200 and heads[0][1] == 2
    assert heads[0][0].content_type == "text/event-stream"
    assert heads[0][0].headers["x-llm-d-request-dropped-reason"] == "none"
    assert seen == [(b"hello", 2)] and p.done and heads[0][0].keep_alive


def test_parser_body_until_close() -> None:
    p = ResponseParser()
    p.feed(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<html>", 1)
    assert not p.done
    p.feed_eof()
    assert p.done


def test_parser_rejects_garbage() -> None:
    with pytest.raises(httptools.HttpParserError):
        ResponseParser().feed(b"NOT HTTP AT ALL\r\n\r\n", 1)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers) == expected
