"""Load-generator benchmark: streams and SSE events one process sustains on one core, and its TTFT error.

    .venv/bin/python benchmarks/loadgen.py [--streams 1000] [--duration 20] [--tokens 40]

Starts the testbed (pinned to the other cores), then runs, one after the other and each pinned to
one core, (1) rushhour's gevent wire client with Locust's request statistics (the code path a
Locust worker runs) and (2) a plain asyncio + aiohttp client (uvloop when installed). Each keeps
``--streams`` requests open in a closed loop for ``--duration`` seconds. The TTFT error of a
request is the client's first-token time minus the testbed ledger's first-token time (both
CLOCK_MONOTONIC on this machine); CPU per event is the client process's user+system CPU divided
by the content events it parsed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# --------------------------------------------------------------------------- clients (subprocesses)


def _prompt_body(tokens: int, i: int) -> bytes:
    from loadgen.engine.wire.dialects import build_body
    from loadgen.prompts import Conversation, text

    conv = Conversation("", [("user", text(f"bench:{i}", 64))])
    return build_body("openai-chat", "testbed-model", conv, tokens, True)[1]


def run_gevent(url: str, streams: int, duration: float, tokens: int, out: Path) -> None:
    import gevent
    from locust.env import Environment

    import loadgen.engine.resilience  # noqa: F401 - a worker imports it at start (attempts.py); not per request
    from loadgen.engine.wire.client import ConnectionPool, Timeouts, perform
    from loadgen.engine.wire.http import Endpoint, build_request
    from loadgen.record import RequestRecord

    env = Environment()
    env.create_local_runner()  # so request events update Locust's stats, as in a worker
    fire = env.events.request.fire
    ep = Endpoint.parse(url)
    body = _prompt_body(tokens, 0)
    results: list[tuple[str, int | None, int]] = []
    stop_at = time.monotonic() + duration
    timeouts = Timeouts(5, 60, 120)

    def user(i: int) -> None:
        pool = ConnectionPool(ep, 1)
        gevent.sleep(i * 0.002)  # spread connection setup
        while time.monotonic() < stop_at:
            rid = uuid.uuid4().hex
            rec = RequestRecord(run_id="b", seq=0, request_id=rid, logical_id=rid, tier="t", tenant="t", persona="p")
            perform(
                pool,
                build_request(ep, "/v1/chat/completions", {"x-request-id": rid}, body),
                rec,
                anchor_ns=0,
                dialect="openai-chat",
                stream=True,
                timeouts=timeouts,
            )
            fire(
                request_type="POST",
                name="t",
                response_time=((rec.done_ns or 0) - (rec.sent_ns or 0)) / 1e6,
                response_length=rec.tokens,
                exception=None if rec.complete else RuntimeError("x"),
                context={},
            )
            results.append((rid, rec.first_token_ns, rec.tokens))

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    gevent.joinall([gevent.spawn(user, i) for i in range(streams)])
    _dump(out, results, cpu0, time.monotonic() - t0, streams)


def run_aiohttp(url: str, streams: int, duration: float, tokens: int, out: Path) -> None:
    import aiohttp

    try:
        import uvloop

        uvloop.install()
        loop_name = "uvloop"
    except ImportError:
        loop_name = "asyncio"
    body = _prompt_body(tokens, 0)
    results: list[tuple[str, int | None, int]] = []

    async def user(session: aiohttp.ClientSession, i: int, stop_at: float) -> None:
        await asyncio.sleep(i * 0.002)
        while time.monotonic() < stop_at:
            rid = uuid.uuid4().hex
            first: int | None = None
            n = 0
            async with session.post(
                url + "/v1/chat/completions",
                data=body,
                headers={"x-request-id": rid, "content-type": "application/json"},
            ) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                        n += 1
                        if first is None:
                            first = time.monotonic_ns()
            results.append((rid, first, n))

    async def main() -> None:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as session:
            stop_at = time.monotonic() + duration
            await asyncio.gather(*(user(session, i, stop_at) for i in range(streams)))

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    asyncio.run(main())
    _dump(out, results, cpu0, time.monotonic() - t0, streams, loop=loop_name)


def _dump(
    out: Path, results: list[tuple[str, int | None, int]], cpu0: Any, wall: float, streams: int, **extra: Any
) -> None:
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    user = cpu1.ru_utime - cpu0.ru_utime
    system = cpu1.ru_stime - cpu0.ru_stime
    out.write_text(
        json.dumps(
            {
                "results": results,
                "cpu_s": user + system,
                "cpu_user_s": user,
                "cpu_sys_s": system,
                "wall_s": wall,
                "streams": streams,
                **extra,
            }
        )
    )


# --------------------------------------------------------------------------- orchestration


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))] if values else float("nan")


def _burst_positions(
    results: list[tuple[str, int | None, int]], ledger: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """TTFT error grouped by the position of a request's first token in the testbed's burst.

    The testbed emits one token for every running stream of a replica in the same engine step, so
    first tokens come in bursts; a burst here is a run of ledger first-token times less than 1 ms
    apart, and a request's position is its rank in that run (the order the testbed wrote them). A
    client that keeps up shows a flat error across positions; one that parses the burst serially
    shows an error that grows with the position.
    """
    rows = sorted(
        (ledger[rid]["first_token_ns"], (first - ledger[rid]["first_token_ns"]) / 1e6)
        for rid, first, _ in results
        if first is not None and rid in ledger and ledger[rid].get("first_token_ns")
    )
    buckets: dict[str, list[float]] = {"0-15": [], "16-63": [], "64-255": [], "256+": []}
    position, previous = 0, None
    for ledger_ns, err in rows:
        position = position + 1 if previous is not None and ledger_ns - previous < 1_000_000 else 0
        previous = ledger_ns
        key = "0-15" if position < 16 else "16-63" if position < 64 else "64-255" if position < 256 else "256+"
        buckets[key].append(err)
    return [
        {"positions": k, "n": len(v), "p50_ms": _pct(v, 0.5), "p99_ms": _pct(v, 0.99)} for k, v in buckets.items() if v
    ]


def _start_testbed(tmp: Path, cores: set[int]) -> tuple[subprocess.Popen[bytes], str, Path]:
    import yaml

    cfg = {
        "profile": "fifo",
        "preset": "h100-llama8b",
        "replicas": 4,
        "speed": 0.25,
        "models": ["testbed-model"],
        "prefix_cache": False,
    }
    (tmp / "tb.yaml").write_text(yaml.safe_dump(cfg))
    ledger = tmp / "ledger.jsonl"
    port_file = tmp / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed",
            "--config",
            str(tmp / "tb.yaml"),
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--ledger",
            str(ledger),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if cores:
        os.sched_setaffinity(proc.pid, cores)
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("testbed did not start")
        time.sleep(0.05)
    time.sleep(0.5)
    return proc, f"http://127.0.0.1:{port_file.read_text().strip()}", ledger


def _run_client(kind: str, url: str, args: argparse.Namespace, tmp: Path, core: int | None) -> dict[str, Any]:
    out = tmp / f"{kind}.json"
    cmd = [
        sys.executable,
        __file__,
        "--client",
        kind,
        "--url",
        url,
        "--streams",
        str(args.streams),
        "--duration",
        str(args.duration),
        "--tokens",
        str(args.tokens),
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT)
    if core is not None:
        os.sched_setaffinity(proc.pid, {core})
    proc.wait(timeout=args.duration * 4 + 120)
    return dict(json.loads(out.read_text()))


def _ledger(path: Path) -> dict[str, dict[str, Any]]:
    rows = {}
    for line in path.read_text().splitlines():
        if line:
            row = json.loads(line)
            rows[row["request_id"]] = row
    return rows


def orchestrate(args: argparse.Namespace) -> None:
    cores = sorted(os.sched_getaffinity(0))
    client_core = cores[0] if len(cores) > 1 else None
    server_cores = set(cores[1:]) if len(cores) > 1 else set()
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for kind in args.clients.split(","):
            (tmp / kind).mkdir()
            tb, url, ledger_path = _start_testbed(tmp / kind, server_cores)
            try:
                data = _run_client(kind, url, args, tmp / kind, client_core)
            finally:
                tb.terminate()
                tb.wait(timeout=20)
            ledger = _ledger(ledger_path)
            errors = [
                (first - ledger[rid]["first_token_ns"]) / 1e6
                for rid, first, _ in data["results"]
                if first is not None and rid in ledger and ledger[rid].get("first_token_ns")
            ]
            events = sum(n for _, _, n in data["results"])
            bursts = _burst_positions(data["results"], ledger)
            label = "rushhour gevent + Locust stats" if kind == "gevent" else f"aiohttp + {data.get('loop')}"
            rows.append(
                {
                    "client": label,
                    "streams": data["streams"],
                    "requests": len(data["results"]),
                    "events_per_s": events / data["wall_s"],
                    "cpu_us_per_event": data["cpu_s"] / max(1, events) * 1e6,
                    "cpu_util": data["cpu_s"] / data["wall_s"],
                    "ttft_err_p50_ms": _pct(errors, 0.5),
                    "ttft_err_p99_ms": _pct(errors, 0.99),
                    "ttft_err_max_ms": max(errors) if errors else float("nan"),
                    "cpu_user_s": data.get("cpu_user_s"),
                    "cpu_sys_s": data.get("cpu_sys_s"),
                    "ttft_err_by_burst_position": bursts,
                }
            )
    print(
        f"\n{args.streams} concurrent streams per client process, {args.duration:.0f} s, "
        f"{args.tokens} tokens per response, client on 1 core (#{client_core})"
    )
    header = (
        f"{'client':<34}{'reqs':>7}{'events/s':>10}{'CPU µs/ev':>11}{'CPU %':>7}"
        f"{'TTFT err p50':>14}{'p99':>8}{'max':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['client']:<34}{r['requests']:>7}{r['events_per_s']:>10.0f}{r['cpu_us_per_event']:>11.1f}"
            f"{r['cpu_util'] * 100:>7.0f}{r['ttft_err_p50_ms']:>12.2f}ms{r['ttft_err_p99_ms']:>6.2f}ms"
            f"{r['ttft_err_max_ms']:>6.1f}ms"
        )
    print("\nTTFT error (ms) by a request's position in its first-token burst (ledger first tokens < 1 ms apart):")
    for r in rows:
        cells = "  ".join(
            f"{b['positions']}: n={b['n']} p50={b['p50_ms']:.2f} p99={b['p99_ms']:.2f}"
            for b in r["ttft_err_by_burst_position"]
        )
        print(f"  {r['client']:<32}{cells}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--json", default=None, help="also write the table as JSON here")
    ap.add_argument("--clients", default="gevent,aiohttp", help="which clients, in this order (comma list)")
    ap.add_argument("--client", choices=("gevent", "aiohttp"), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client == "gevent":
        run_gevent(args.url, args.streams, args.duration, args.tokens, Path(args.out))
    elif args.client == "aiohttp":
        run_aiohttp(args.url, args.streams, args.duration, args.tokens, Path(args.out))
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
