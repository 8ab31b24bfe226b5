"""Shared helpers: an in-process testbed on 127.0.0.1 and small HTTP helpers."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from rushhour.testbed.config import TestbedConfig, load_config
from rushhour.testbed.ledger import Ledger
from rushhour.testbed.server import SERVER_KEY, Server, build_app


def tiny(**overrides: Any) -> TestbedConfig:
    """A fast config: tiny preset, high speed."""
    base: dict[str, Any] = {"preset": "tiny", "replicas": 1, "speed": 20.0}
    base.update(overrides)
    return load_config(None, **base)


@dataclass
class Running:
    """A started testbed."""

    url: str
    server: Server
    session: aiohttp.ClientSession

    def ledger(self) -> list[dict[str, Any]]:
        """Parsed ledger lines."""
        return [json.loads(x) for x in self.server.ledger.lines]

    def by_id(self) -> dict[str, dict[str, Any]]:
        """Ledger keyed by request id (asserts uniqueness)."""
        recs = self.ledger()
        ids = [r["request_id"] for r in recs]
        assert len(ids) == len(set(ids)), "duplicate ledger lines"
        return {r["request_id"]: r for r in recs}


@contextlib.asynccontextmanager
async def running(cfg: TestbedConfig) -> AsyncIterator[Running]:
    """Serve `cfg` on an ephemeral port for the duration of the block."""
    app = build_app(cfg, Ledger(None))
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        try:
            yield Running(f"http://127.0.0.1:{port}", app[SERVER_KEY], s)
        finally:
            await runner.cleanup()


def chat(content: str = "hello", max_tokens: int = 4, stream: bool = False, **extra: Any) -> dict[str, Any]:
    """A chat completions body."""
    body: dict[str, Any] = {"model": "testbed", "messages": [{"role": "user", "content": content}],
                            "max_tokens": max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


@dataclass
class Result:
    """What a client saw."""

    status: int
    headers: dict[str, str]
    text: str
    broken: bool = False  # the connection dropped before the end of the body

    def events(self) -> list[str]:
        """SSE data payloads; any line that is not SSE (say, leaked chunk-size framing) fails the test."""
        stray = [ln for ln in self.text.split("\n") if ln and not ln.startswith(("data: ", "event: ", ":"))]
        assert not stray, f"not SSE: {stray[:3]}"
        return [ln[6:] for ln in self.text.split("\n") if ln.startswith("data: ")]


async def post(r: Running, path: str, body: Any, headers: dict[str, str] | None = None,
               raw: bytes | None = None) -> Result:
    """POST and read the whole response."""
    data = raw if raw is not None else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    async with r.session.post(r.url + path, data=data, headers=h) as resp:
        buf = bytearray()
        broken = False
        try:
            async for chunk in resp.content.iter_any():
                buf += chunk
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
            broken = True
        text = buf.decode("utf-8", errors="replace")
        return Result(resp.status, {k.lower(): v for k, v in resp.headers.items()}, text, broken)


def chained_blocks(parts: list[int]) -> list[int]:
    """Block ids chained as a prompt's are (64-bit numbers): each block's id covers every part before it."""
    h = hashlib.blake2b(digest_size=8)
    out = []
    for p in parts:
        h.update(p.to_bytes(4, "little"))
        out.append(int.from_bytes(h.digest(), "little"))
    return out


class PlainLru:
    """The prefix cache as plain loops (the reference its radix tree is held to): a match moves its hits to the end
    tail first (vLLM frees a request's blocks in reverse order), an insert does so with every block, then the oldest
    go past the capacity (or ``limit``)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.blocks = capacity, OrderedDict[int, None]()

    def match(self, blocks: list[int], touch: bool = True) -> int:
        n = 0
        for h in blocks:
            if h not in self.blocks:
                break
            n += 1
        if touch:
            for h in reversed(blocks[:n]):
                self.blocks.move_to_end(h)
        return n

    def insert(self, blocks: list[int], limit: int | None = None) -> None:
        for h in reversed(blocks):
            self.blocks.pop(h, None)
            self.blocks[h] = None
        cap = self.capacity if limit is None else min(self.capacity, limit)
        while len(self.blocks) > max(0, cap):
            self.blocks.popitem(last=False)
