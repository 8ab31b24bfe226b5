# ruff: noqa: E501 - wire fixtures are quoted verbatim, one event per line
"""A scripted, hostile HTTP server for wire-client tests: each request's ``x-mode`` header picks a behaviour.

Runs in a thread (unit tests) or as its own process (``python wire_fakes.py --port-file F``, e2e).
Plain blocking sockets, so it shares nothing with gevent or asyncio.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import ssl
import struct
import sys
import threading
import time

CHAT_CHUNK = b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"}}]}'


def sse(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n" if body else b"0\r\n\r\n"


def _head(status: int, ctype: str, extra: str = "", length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {ctype}"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_request(conn: socket.socket) -> dict[str, str] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    need = int(headers.get("content-length", "0"))
    while len(body) < need:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return headers


def _stream(conn: socket.socket, events: list[bytes], gap_s: float = 0.0) -> None:
    conn.sendall(_head(200, "text/event-stream"))
    for event in events:
        conn.sendall(chunked(event))
        if gap_s:
            time.sleep(gap_s)
    conn.sendall(chunked(b""))


def handle(conn: socket.socket, pick: object = None) -> None:
    """Serve requests on one connection until it closes or a mode ends it (``pick()`` overrides x-mode)."""
    try:
        while True:
            headers = _read_request(conn)
            if headers is None:
                return
            mode = pick() if callable(pick) else headers.get("x-mode", "ok")
            if mode == "ok":
                usage = b'{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}},"service_tier":"flex"}'
                _stream(conn, [sse(CHAT_CHUNK), sse(CHAT_CHUNK), sse(CHAT_CHUNK), sse(usage, b"[DONE]")], 0.005)
            elif mode == "slowtokens":  # 30 tokens, each its own TCP segment 2 ms apart (as a real engine)
                _stream(conn, [sse(CHAT_CHUNK)] * 30 + [sse(b"[DONE]")], 0.002)
            elif mode == "anthropic":
                events = [
                    b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":5,"cache_read_input_tokens":2,"service_tier":"priority"}}}\n\n',
                    b'event: ping\ndata: {"type":"ping"}\n\n',
                    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}\n\n',
                    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"b"}}\n\n',
                    b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":2}}\n\n',
                    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
                ]
                _stream(conn, events)
            elif mode == "inband":
                err = b'{"error":{"object":"error","message":"Request waiting timeout reached.","type":"SERVICE_UNAVAILABLE","param":null,"code":503}}'
                _stream(conn, [sse(CHAT_CHUNK), sse(err), sse(b"[DONE]")])
            elif mode == "malformed":
                _stream(conn, [sse(CHAT_CHUNK), b"data: {not json\n\n", b"garbage line\n\n", sse(b"[DONE]")])
            elif mode == "html":
                page = b"<html><body>502 Bad Gateway</body></html>"
                conn.sendall(_head(200, "text/html", length=len(page)) + page)
            elif mode == "429":
                body = json.dumps(
                    {
                        "error": {
                            "message": "slow down sk-abcdefghijklmnopqrstuv",
                            "type": "rate_limit_error",
                            "code": "rate_limit_exceeded",
                        }
                    }
                ).encode()
                conn.sendall(_head(429, "application/json", "retry-after-ms: 1500", len(body)) + body)
            elif mode == "timed":  # a whole answer with vLLM's metrics and LiteLLM's timing headers, one hostile
                body = (b'{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":7,"completion_tokens":1},'
                        b'"metrics":{"queue_time_ms":120.5,"time_to_first_token_ms":8.25,"mean_itl_ms":-3}}')
                extra = ("x-litellm-overhead-duration-ms: 12.5\r\nx-litellm-response-duration-ms: 1e400\r\n"
                         "x-testbed-gateway-queue-ms: 40")
                conn.sendall(_head(200, "application/json", extra, len(body)) + body)
            elif mode == "llmd429":
                body = b"inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
                conn.sendall(
                    _head(429, "text/plain", "x-llm-d-request-dropped-reason: rejected-saturated", len(body)) + body
                )
            elif mode == "echoauth":  # a hostile server that reflects the credential back
                body = json.dumps(
                    {"error": {"message": f"bad key {headers.get('authorization')}", "type": "authentication_error"}}
                ).encode()
                conn.sendall(_head(401, "application/json", length=len(body)) + body)
            elif mode == "truncate":
                conn.sendall(_head(200, "text/event-stream") + chunked(sse(CHAT_CHUNK)))
                time.sleep(0.02)
                return
            elif mode == "reset":
                conn.sendall(_head(200, "text/event-stream") + chunked(sse(CHAT_CHUNK)))
                time.sleep(0.02)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            elif mode == "silent":
                time.sleep(float(headers.get("x-silent-s", "3")))
                return
            elif mode == "garbage":
                conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                return
            elif mode == "flood":  # a 200 stream whose first event never ends: 64 KiB chunks at full speed
                conn.sendall(_head(200, "text/event-stream") + chunked(b"data: {\"x\":\""))
                block = chunked(b"x" * 65536)
                while True:
                    conn.sendall(block)
            elif mode == "floodevents":  # valid token events at full speed, never an end marker
                conn.sendall(_head(200, "text/event-stream"))
                block = chunked(sse(*[CHAT_CHUNK] * 600))
                while True:
                    conn.sendall(block)
            elif mode == "floodhead":  # a header block that never ends, at full speed
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Junk: ")
                block = b"j" * 65536
                while True:
                    conn.sendall(block)
            elif mode == "tricklehead":  # a header block that never ends, one byte at a time
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Junk: ")
                while True:
                    conn.sendall(b"j")
                    time.sleep(0.01)
            elif mode == "bigjson":  # a complete non-streamed 2xx answer far over 64 KiB
                text = "word " * 40000
                body = json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": 9, "completion_tokens": 40000},
                    }
                ).encode()
                conn.sendall(_head(200, "application/json", length=len(body)) + body)
            else:
                conn.sendall(_head(404, "text/plain", length=2) + b"no")
    except OSError:
        pass
    finally:
        conn.close()


class FakeServer:
    """Listens on an ephemeral loopback port; one thread per connection."""

    def __init__(self, pick: object = None, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls  # serve HTTPS with this server-side context
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.pick = pick
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:
                conn.close()
                return
        handle(conn, self.pick)

    def close(self) -> None:
        self.sock.close()


def main() -> int:
    """Serve a cycle of modes (the run cannot set x-mode): request n gets mode n mod len(cycle)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--cycle", default="ok,inband,malformed,html,429,truncate,reset,silent,garbage")
    args = ap.parse_args()
    modes = args.cycle.split(",")
    lock = threading.Lock()
    count = [0]

    def pick() -> str:
        with lock:
            count[0] += 1
            return modes[(count[0] - 1) % len(modes)]

    server = FakeServer(pick).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(server.port))
    os.replace(tmp, args.port_file)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    sys.exit(main())
