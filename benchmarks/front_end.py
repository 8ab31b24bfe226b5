"""Where does a vLLM server on one core spend a streamed request's time: engine steps, or its API front end?

    .venv/bin/python benchmarks/front_end.py [--url URL] [--reps 3] [--json OUT]

Starts vLLM 0.32 (engines/serve.py: the tiny model on one CPU core, ``--enable-per-request-metrics``) unless
``--url`` names a running one, then sends designed bursts with aiohttp and reads each answer's engine timing
(``metrics``: queue, scheduled → first token, mean inter-token, all stamped by the engine core):

1. ``streams``: N requests at once (N = 1, 2, 4), each pinned to T output tokens (T = 16, 128), streamed and
   not streamed. The engine does the same work either way; only the front end differs (one SSE chunk per token
   or one answer at the end). If the front end shares the engine's core and its per-token work serialises with
   the engine's steps, the engine's own inter-token time is longer when streamed, by a cost per streamed token.
2. ``arrivals``: one stream of 128 tokens decoding while requests the front end refuses itself (a prompt past
   ``max_model_len``: tokenised, then 400, never reaching the engine) arrive at R per second. Any rise of the
   stream's engine inter-token time is the front end's per-request cost taken from the engine's core.

It prints one row per case (medians over the reps): engine ITL, the client's ITL, engine prefill and queue, the
client's TTFT minus both (the front end's share before the first token), and the tokens per second of the burst.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
WORD = " hello"  # one token of the tiny model's tokenizer per word (the prompt's size is read back from usage)


def _serve() -> Any:
    spec = importlib.util.spec_from_file_location("rushhour_engines_serve", ROOT / "engines" / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _body(prompt: int, tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": WORD * prompt}],
                            "max_tokens": tokens, "min_tokens": tokens, "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def one(session: aiohttp.ClientSession, url: str, prompt: int, tokens: int, stream: bool) -> dict[str, Any]:
    """One request: the client's sent / first token / done times (s) and the engine's ``metrics``."""
    sent = time.perf_counter()
    first = None
    chunks = 0
    metrics: dict[str, Any] = {}
    async with session.post(url + "/v1/chat/completions", json=_body(prompt, tokens, stream)) as resp:
        if not stream:
            obj = await resp.json()
            first = time.perf_counter()
            metrics = obj.get("metrics") or {}
        else:
            async for line in resp.content:
                if not line.startswith(b"data: {"):
                    continue
                obj = json.loads(line[6:])
                if obj.get("choices") and obj["choices"][0].get("delta", {}).get("content") is not None:
                    chunks += 1
                    first = first or time.perf_counter()
                if obj.get("metrics"):
                    metrics = obj["metrics"]
    done = time.perf_counter()
    return {"status": resp.status, "sent": sent, "first": first, "done": done, "chunks": chunks, **metrics}


async def refused(session: aiohttp.ClientSession, url: str, rate: float, until: float) -> int:
    """Requests the front end refuses itself (a short prompt asking past the context: tokenised, then 400, never
    reaching the engine), at ``rate``/s until ``until``; how many were sent."""
    n = 0
    tasks = []
    t = time.perf_counter()
    while t < until:
        tasks.append(asyncio.create_task(one(session, url, 64, 100_000, False)))
        n += 1
        t += 1 / rate
        await asyncio.sleep(max(0.0, t - time.perf_counter()))
    await asyncio.gather(*tasks, return_exceptions=True)
    return n


def cpu_seconds(pids: list[int], leader: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of the API server (the group's leader) and of the rest (engine core)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"api": 0.0, "engine": 0.0}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out["api" if pid == leader else "engine"] += (int(fields[11]) + int(fields[12])) / tick
    return out


class Cpu:
    """The server's CPU seconds per role between ``start`` and ``stop`` (nothing when the server is not ours)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.before: dict[str, float] = {}

    def start(self) -> None:
        if self.server is not None:
            self.before = cpu_seconds(self.server.pids(), self.server.proc.pid)

    def stop(self) -> dict[str, float]:
        if self.server is None:
            return {}
        after = cpu_seconds(self.server.pids(), self.server.proc.pid)
        return {k: after[k] - self.before.get(k, 0.0) for k in after}


def _med(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def summarise(case: str, results: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    """The case's row: medians of the engine's and the client's times (ms), tokens per second of each burst."""
    ok = [r for r in results if r["status"] == 200]
    eng_itl = [r["mean_itl_ms"] for r in ok if r.get("mean_itl_ms")]
    cli_itl = [(r["done"] - r["first"]) * 1000 / (tokens - 1) for r in ok if r["first"] and r["chunks"] > 1]
    front = [(r["first"] - r["sent"]) * 1000 - r["queue_time_ms"] - r["time_to_first_token_ms"] for r in ok
             if r["first"] and r.get("queue_time_ms") is not None and r.get("time_to_first_token_ms") is not None]
    return {"case": case, "n": len(ok), "engine_itl_ms": _med(eng_itl), "client_itl_ms": _med(cli_itl),
            "engine_prefill_ms": _med([r["time_to_first_token_ms"] for r in ok if r.get("time_to_first_token_ms")]),
            "engine_queue_ms": _med([r["queue_time_ms"] for r in ok if r.get("queue_time_ms") is not None]),
            "front_ms": _med(front), "end_to_end_ms": _med([(r["done"] - r["sent"]) * 1000 for r in ok])}


async def main_async(url: str, reps: int, cpu: Cpu) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        for _ in range(3):  # warm-up
            await one(session, url, 64, 8, True)
        for tokens in (16, 128):
            for n in (1, 2, 4):
                for stream in (True, False):
                    results: list[dict[str, Any]] = []
                    rates = []
                    cpu.start()
                    for _ in range(reps):
                        t0 = time.perf_counter()
                        burst = await asyncio.gather(*(one(session, url, 64, tokens, stream) for _ in range(n)))
                        rates.append(n * tokens / (time.perf_counter() - t0))
                        results += burst
                        await asyncio.sleep(0.2)
                    row = summarise(f"streams N={n} T={tokens} {'stream' if stream else 'no-stream'}", results,
                                    tokens)
                    row["tokens_per_s"] = _med(rates)
                    used = cpu.stop()
                    if used:  # CPU ms per request and per token, each role (the 0.2 s pauses idle)
                        row["api_cpu_ms_per_req"] = round(1000 * used["api"] / (n * reps), 2)
                        row["api_cpu_ms_per_token"] = round(1000 * used["api"] / (n * reps * tokens), 3)
                        row["engine_cpu_ms_per_token"] = round(1000 * used["engine"] / (n * reps * tokens), 3)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        for rate in (0.0, 20.0, 50.0, 100.0):
            results = []
            counts = []
            cpu.start()
            for _ in range(reps):
                t0 = time.perf_counter()
                main = asyncio.create_task(one(session, url, 64, 128, True))
                # their own connections: the server closes one after a 400, which must not cut the stream's
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as other:
                    counts.append(await refused(other, url, rate, t0 + 1.5) if rate else 0)
                results.append(await main)
                await asyncio.sleep(0.2)
            row = summarise(f"arrivals R={rate:g}/s refused", results, 128)
            row["refused_sent"] = sum(counts)
            used = cpu.stop()
            if used:  # the API server's CPU: the stream's own (R = 0) plus the refused requests'
                row["api_cpu_ms"] = round(1000 * used["api"], 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=None, help="a running vLLM started by engines/serve.py (default: start one)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cpu", default="1", help="the core vLLM serves on ('none': unpinned, both cores)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    server = None
    url = args.url
    if url is None:
        server = _serve().start_vllm(cpu=None if args.cpu == "none" else int(args.cpu))
        url = server.url
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        if hasattr(os, "sched_setaffinity") and args.cpu != "none" and (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(0, {0})  # the client off the engine's core: its own parsing is not the server's
        rows = asyncio.run(main_async(url, args.reps, Cpu(server)))
        print(f"load average after: {os.getloadavg()[0]:.1f}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
