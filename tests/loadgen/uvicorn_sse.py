"""A real uvicorn server with a tiny ASGI app that streams OpenAI-style chat chunks, as vLLM and LiteLLM do.

Run as its own process: ``python uvicorn_sse.py --port-file F --keep-alive 1``. It binds an ephemeral
loopback port, writes it to F, and serves until SIGTERM. Every POST is counted by its ``x-request-id``;
``GET /seen`` answers with those counts, so a test can check the server saw each request exactly once.
A request with ``x-keepalive-header: N`` gets ``Keep-Alive: timeout=N`` on its response.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections import Counter
from typing import Any

import uvicorn

CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'
USAGE = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\n'
)
seen: Counter[str] = Counter()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    more = True
    while more:  # read the whole request body
        message = await receive()
        more = message.get("more_body", False)
    if scope["method"] == "GET" and scope["path"] == "/seen":
        body = json.dumps(seen).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        return
    seen[headers.get("x-request-id", "")] += 1
    out = [(b"content-type", b"text/event-stream")]
    if "x-keepalive-header" in headers:
        out.append((b"keep-alive", f"timeout={headers['x-keepalive-header']}".encode()))
    await send({"type": "http.response.start", "status": 200, "headers": out})
    for _ in range(3):
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
        await asyncio.sleep(0.002)
    await send({"type": "http.response.body", "body": USAGE + b"data: [DONE]\n\n", "more_body": False})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--keep-alive", type=float, default=1.0, help="uvicorn's timeout_keep_alive (s)")
    args = ap.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port is published: a client may connect before uvicorn has started
    config = uvicorn.Config(app, timeout_keep_alive=args.keep_alive, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(sock.getsockname()[1]))
    os.replace(tmp, args.port_file)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
