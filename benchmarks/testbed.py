"""Benchmark the testbed on one core: concurrent SSE streams, events/s and step-timer lag p99.

The server runs pinned to one CPU; a lean raw-socket asyncio client runs pinned to another, so the
client is not the bottleneck. For each stream count the script starts a fresh server, opens that many
keep-alive connections, each looping streaming requests, and measures over a window:
events/s received by the client, the server's step-timer lag p99 (/admin/stats) and server CPU.

    .venv/bin/python benchmarks/testbed.py --streams 500,1000,2000 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_ROOT = ROOT  # --server-root: run another checkout's testbed (before/after comparisons)


def _pin(cpu: int) -> list[str]:
    if cpu < 0 or not hasattr(os, "sched_setaffinity") or cpu >= (os.cpu_count() or 1):
        return []
    return ["taskset", "-c", str(cpu)]


def _get(url: str, method: str = "GET") -> dict[str, object]:
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _runq_wait_s(pid: int) -> float:
    """Seconds the process has spent runnable but waiting for a CPU (/proc/PID/schedstat, field 2):
    the share of the window the server was held off its core by other work."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


# ---- client (its own process) -------------------------------------------------------------------
class _Stream(asyncio.Protocol):
    """One keep-alive connection that re-sends a streaming request whenever one ends."""

    def __init__(self, request: bytes, counter: list[int]) -> None:
        self.request = request
        self.counter = counter
        self.transport: asyncio.WriteTransport | None = None
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence the cast
        t: asyncio.WriteTransport = transport  # type: ignore[assignment]
        self.transport = t
        t.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.counter[0] += data.count(b"data: ")
        buf = self.tail + data
        if b"data: [DONE]" in buf and b"0\r\n\r\n" in buf[buf.rfind(b"data: [DONE]"):]:
            self.counter[1] += 1
            assert self.transport is not None
            self.transport.write(self.request)
        self.tail = buf[-64:]


async def _client(port: int, streams: int, max_tokens: int, warmup: float, duration: float,
                  stagger: float = 0.0) -> None:
    body = json.dumps({"model": "testbed", "messages": [{"role": "user", "content": "benchmark " * 20}],
                       "max_tokens": max_tokens, "stream": True}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
    loop = asyncio.get_running_loop()
    counter = [0, 0]
    if stagger > 0:
        # spread the first requests over `stagger` seconds so completions (and the re-sends they
        # trigger) do not all fall in the same replica step
        rng = random.Random(0)

        async def later(d: float) -> None:
            await asyncio.sleep(d)
            await loop.create_connection(lambda: _Stream(req, counter), "127.0.0.1", port)

        await asyncio.gather(*(later(rng.uniform(0, stagger)) for _ in range(streams)))
    else:
        for i in range(streams):
            await loop.create_connection(lambda: _Stream(req, counter), "127.0.0.1", port)
            if i % 100 == 99:
                await asyncio.sleep(0.01)
    await asyncio.sleep(warmup)
    _get(f"http://127.0.0.1:{port}/admin/stats/reset", "POST")
    e0, t0 = counter[0], time.perf_counter()
    await asyncio.sleep(duration)
    e1, t1 = counter[0], time.perf_counter()
    # the server's stats are read while every stream is still open: closing 2,000 connections is
    # itself a burst of work that must not land in the measured window
    stats = _get(f"http://127.0.0.1:{port}/admin/stats")
    print(json.dumps({"events_per_s": (e1 - e0) / (t1 - t0), "completed": counter[1], "stats": stats}),
          flush=True)


# ---- orchestration ------------------------------------------------------------------------------
def run_one(streams: int, speed: float, duration: float, warmup: float, max_tokens: int,
            server_cpu: int, client_cpu: int, stagger: float = 0.0) -> dict[str, object]:
    """Start a server, drive `streams` streams, return the measured row."""
    replicas = max(1, -(-streams // 256))
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen(
            [*_pin(server_cpu), sys.executable, "-m", "rushhour.testbed", "--port", "0", "--port-file", str(port_file),
             "--preset", "h100-llama8b", "--replicas", str(replicas), "--speed", str(speed), "--profile", "llm-d"],
            cwd=SERVER_ROOT, stdout=subprocess.DEVNULL)
        try:
            for _ in range(200):
                if port_file.exists():
                    break
                time.sleep(0.05)
            port = int(port_file.read_text())
            client = subprocess.Popen(
                [*_pin(client_cpu), sys.executable, __file__, "--client", str(port), "--streams", str(streams),
                 "--max-tokens", str(max_tokens), "--warmup", str(warmup), "--duration", str(duration),
                 "--stagger", str(stagger)],
                stdout=subprocess.PIPE, text=True)
            time.sleep(warmup + 0.5)
            c0, q0, w0 = _cpu_s(server.pid), _runq_wait_s(server.pid), time.perf_counter()
            time.sleep(duration - 1.0)
            c1, q1, w1 = _cpu_s(server.pid), _runq_wait_s(server.pid), time.perf_counter()
            out, _ = client.communicate(timeout=warmup + duration + 120)
            res = json.loads(out.strip().splitlines()[-1])
        finally:
            server.terminate()
            server.wait(timeout=30)
    stats = res["stats"]
    cpu = (c1 - c0) / (w1 - w0)
    eps = float(res["events_per_s"])
    return {"streams": streams, "replicas": replicas, "speed": speed,
            "events_per_s": round(eps),
            "lag_p50_ms": round(float(stats["lag_p50_s"]) * 1e3, 2),
            "lag_p99_ms": round(float(stats["lag_p99_s"]) * 1e3, 2),
            "write_p50_ms": round(float(stats.get("write_lag_p50_s", 0.0)) * 1e3, 2),
            "write_p99_ms": round(float(stats.get("write_lag_p99_s", 0.0)) * 1e3, 2),
            "server_cpu_pct": round(100 * cpu, 1),
            "runq_wait_pct": round(100 * (q1 - q0) / (w1 - w0), 1),
            "us_per_event": round(1e6 * cpu / eps, 1) if eps else 0.0,
            "completed": int(res["completed"])}


COLS = ["streams", "replicas", "speed", "events_per_s", "lag_p50_ms", "lag_p99_ms", "write_p50_ms",
        "write_p99_ms", "server_cpu_pct", "runq_wait_pct", "us_per_event", "completed"]


def _median_row(rows: list[dict[str, object]]) -> dict[str, object]:
    out = dict(rows[0])
    for c in COLS[3:]:
        vals = sorted(float(r.get(c, 0.0)) for r in rows)  # type: ignore[arg-type]
        out[c] = round(vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1]
                                                                   + vals[len(vals) // 2]) / 2, 2)
    return out


def main() -> int:
    """CLI."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="500,1000,2000")
    ap.add_argument("--speed", type=float, default=0.5, help="testbed time scale (0.5 = steps take 2x longer)")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--max-tokens", type=int, default=2000)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="runs per stream count; the table shows medians")
    ap.add_argument("--client", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--stagger", type=float, default=0.0,
                    help="spread the streams' first requests over this many seconds (desynchronises completions)")
    ap.add_argument("--server-root", default=None, help="directory holding the testbed package to run")
    a = ap.parse_args()
    if a.server_root:
        global SERVER_ROOT
        SERVER_ROOT = Path(a.server_root).resolve()
    if a.client is not None:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        asyncio.run(_client(a.client, int(a.streams), a.max_tokens, a.warmup, a.duration, a.stagger))
        return 0
    rows: list[dict[str, object]] = []
    for n in a.streams.split(","):
        runs = []
        for k in range(a.repeat):
            r = run_one(int(n), a.speed, a.duration, a.warmup, a.max_tokens, a.server_cpu, a.client_cpu,
                        a.stagger)
            runs.append(r)
            print(f"# run {k + 1}/{a.repeat}: {json.dumps(r)}", flush=True)
        rows.append(_median_row(runs))
    print(f"# medians of {a.repeat} run(s); max_tokens={a.max_tokens} duration={a.duration}s stagger={a.stagger}s "
          f"server cpu {a.server_cpu}, client cpu {a.client_cpu}; load average {os.getloadavg()[0]:.2f}")
    print(" | ".join(f"{c:>12}" for c in COLS))
    for r in rows:
        print(" | ".join(f"{r[c]!s:>12}" for c in COLS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
