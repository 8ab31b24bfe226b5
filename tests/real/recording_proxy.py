"""A recording reverse proxy on loopback, for the ``real`` tests: what went on the wire, byte for byte.

It sits between rushhour and a real server: every request is forwarded to the upstream unchanged (same
method, path, query, body and headers minus the hop-by-hop ones), and the answer is streamed back as it
arrives, chunk by chunk (an SSE stream stays a stream), with the upstream's status and headers. Per
``x-request-id`` header (rushhour sends one per attempt) it keeps the request's body and every byte of
the answer::

    with RecordingProxy(vllm.url) as proxy:
        run_rushhour(scenario, proxy.url, out)
    proxy.exchanges["<request id>"].request_json()["messages"]

aiohttp on its own event loop in a daemon thread; ``stop()`` closes the listener and the upstream pool.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

# Hop-by-hop headers (RFC 9110 7.6.1) and the ones the two connections compute for themselves.
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
                  "host", "content-length"})


@dataclass
class Exchange:
    """One request through the proxy and the upstream's answer."""

    request_id: str
    method: str
    path: str
    request_body: bytes
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes = b""
    chunks: int = 0  # body pieces written back as they came (a stream is many)
    error: str | None = None  # the upstream failed, or the client went away mid-answer
    done: bool = False  # the whole answer was relayed

    def request_json(self) -> dict[str, Any]:
        return dict(json.loads(self.request_body))


class RecordingProxy:
    """Forwards to ``upstream`` (``http://host:port``) and records each exchange by its ``x-request-id``."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        self.upstream = upstream.rstrip("/")
        self.host = host
        self.url = ""
        self.exchanges: dict[str, Exchange] = {}
        self.unlabelled: list[Exchange] = []  # requests without an x-request-id (health checks, model lists)
        self.replaced: list[Exchange] = []  # earlier exchanges of an x-request-id that came again
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    # ---------------------------------------------------------------------------------------- lifecycle

    def start(self, timeout_s: float = 30.0) -> RecordingProxy:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._start())
            except BaseException as exc:  # reported to the caller below
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="recording-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise RuntimeError("the recording proxy did not start")
        if failure:
            raise RuntimeError(f"the recording proxy did not start: {failure[0]!r}")
        return self

    async def _start(self) -> None:
        # no decompression: the bytes recorded and relayed are the upstream's own
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.url = f"http://{self.host}:{self._runner.addresses[0][1]}"

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._thread is None:
            return

        async def close() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout_s)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        self._thread = None
        self._loop.close()

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------ reading

    def snapshot(self) -> dict[str, Exchange]:
        """The exchanges recorded so far, by request id."""
        with self._lock:
            return dict(self.exchanges)

    def dump(self, path: Path) -> Path:
        """Every exchange as one JSON line (request body as text, the answer's bytes as text), for a failing test."""
        with self._lock, open(path, "w") as out:
            for x in [*self.exchanges.values(), *self.unlabelled, *self.replaced]:
                row = {"request_id": x.request_id, "method": x.method, "path": x.path, "status": x.status,
                       "error": x.error, "done": x.done, "chunks": x.chunks,
                       "request": x.request_body.decode(errors="replace"),
                       "response": x.response_body.decode(errors="replace")}
                out.write(json.dumps(row) + "\n")
        return path

    def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Until every exchange has ended (relayed or failed): the client may close before the last byte."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with self._lock:
                if all(x.done or x.error for x in [*self.exchanges.values(), *self.unlabelled]):
                    return
            time.sleep(0.1)

    # ------------------------------------------------------------------------------------------ serving

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        rid = request.headers.get("x-request-id", "")
        exchange = Exchange(rid, request.method, request.path_qs, body)
        with self._lock:
            if rid:
                if rid in self.exchanges:  # sent again (a client's resend): the last one is the exchange
                    self.replaced.append(self.exchanges[rid])
                self.exchanges[rid] = exchange
            else:
                self.unlabelled.append(exchange)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            async with self._session.request(request.method, self.upstream + request.path_qs, data=body,
                                             headers=headers, allow_redirects=False) as upstream:
                exchange.status = upstream.status
                exchange.response_headers = {k.lower(): v for k, v in upstream.headers.items()}
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for key, value in upstream.headers.items():
                    if key.lower() not in _HOP:
                        response.headers.add(key, value)
                length = upstream.headers.get("content-length")
                if length is not None:
                    response.content_length = int(length)  # a whole body stays one (no chunked framing)
                await response.prepare(request)
                parts: list[bytes] = []
                try:
                    async for chunk in upstream.content.iter_any():
                        parts.append(chunk)
                        exchange.chunks += 1
                        await response.write(chunk)  # relayed the moment it arrives: SSE events stay events
                finally:
                    exchange.response_body = b"".join(parts)
                await response.write_eof()
                exchange.done = True
                return response
        except (aiohttp.ClientError, ConnectionError, asyncio.CancelledError) as exc:
            exchange.error = f"{type(exc).__name__}: {exc}"
            raise
