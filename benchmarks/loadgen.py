"""Load-generator benchmark: streams and SSE events one process sustains on one core, and its TTFT error.

    .venv/bin/python benchmarks/loadgen.py [--streams 1000,2000,4000] [--duration 20] [--tokens 40]
        [--clients compiled,interpreted,fasthttp,aiohttp] [--processes 1] [--tokenized] [--json FILE]

Starts the testbed (pinned to the last core), then runs, one after the other and each pinned to one
core (``taskset``), (1) rushhour's wire client with Locust's request statistics (the code path a Locust
worker runs): ``compiled`` (its hot modules from the mypyc build, loadgen/compiled.py: made first if
missing, and the row fails if the process did not load it), ``interpreted`` (the same sources,
``RUSHHOUR_COMPILED=0``) and, on request, ``greenlet`` (each stream's greenlet reads its own socket: the
path before the reactor); (2) Locust's own ``FastHttpUser`` client (geventhttpclient, lines read as
they arrive) and (3) a plain asyncio + aiohttp client (uvloop when installed). Each keeps ``--streams``
requests open in a closed loop for ``--duration`` seconds; ``--streams`` takes a list, each count a
group of rows against a fresh testbed per row. The TTFT error of a request is the client's first-token
time minus the testbed ledger's first-token time (both CLOCK_MONOTONIC on this machine); CPU per event
is the client process's user+system CPU divided by the content events it parsed. ``--processes N``
runs N client processes of ``--streams`` streams each at once (one core each where there are cores).

Whose error a TTFT tail is: the testbed writes a first token at once after stamping it (measured: 0.02–0.06 ms,
its write buffer empty; 5.5–12.3 ms for 7 of 3,624 when its busy core descheduled it), and rushhour's rows
take the kernel's receive stamp, which on loopback is the testbed's ``send``; but the kernel's stamp of a TCP
read is its newest segment's, so a first token read together with later tokens (the client's loop came late:
a stall, a collector sweep, a descheduled process) is stamped at a later token's arrival. rushhour's rows
therefore also print the TTFT error of first tokens read alone (the stamp's own error) apart from those read
with later tokens (the client's lateness), the loop's stalls over 5 ms (a 10 ms timer's lateness) and the
cyclic collector's full sweeps. At the end the issue's goals (#41) are printed against the run's rows;
``--tokenized`` then runs ``benchmarks/tokenized.py`` (no agents, and encodings off the loop: 10 agents/s of
30k-token prompts for ``--duration`` s) for the loop-stall goal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
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
    from rushhour.loadgen.engine.wire.dialects import build_body
    from rushhour.loadgen.prompts import Conversation, text

    conv = Conversation("", [("user", text(f"bench:{i}", 64))])
    return build_body("openai-chat", "testbed-model", conv, tokens, True)[1]


def run_gevent(url: str, streams: int, duration: float, tokens: int, out: Path, reactor: bool = True) -> None:
    import gevent
    from locust.env import Environment

    import rushhour.loadgen.resilience  # noqa: F401 - a worker imports it at start (attempts.py); not per request
    from rushhour.loadgen.compiled import wire_status
    from rushhour.loadgen.engine.wire import client
    from rushhour.loadgen.engine.wire.client import ConnectionPool, Timeouts, perform
    from rushhour.loadgen.engine.wire.http import Endpoint, build_request
    from rushhour.loadgen.engine.wire.reactor import reactor as the_reactor
    from rushhour.records.record import FIRST_TOKEN_KERNEL, RequestRecord

    client.USE_REACTOR = reactor
    # how much later the reactor read first-token bytes than the kernel received them (the record says both)
    read_delays: list[int] = []
    batches: dict[str, int] = {}  # tokens in the read that brought a request's first token
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
            if rec.first_token_batch:
                batches[rid] = rec.first_token_batch
            if rec.first_token_clock == FIRST_TOKEN_KERNEL and rec.first_token_read_ns and rec.first_token_ns:
                read_delays.append(rec.first_token_read_ns - rec.first_token_ns)

    stalls, sweeps = _watch_loop(stop_at)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    gevent.joinall([gevent.spawn(user, i) for i in range(streams)])
    _dump(out, results, cpu0, time.monotonic() - t0, streams, passes=the_reactor().passes if reactor else 0,
          read_delays_ms=[d / 1e6 for d in read_delays], code=wire_status(), batches=batches, stalls_ms=stalls,
          gc_ms=sweeps)


STALL_TICK_S = 0.01  # the stall watcher's timer: 100 wake-ups a second (~0.1 µs per event at 10k events/s)
STALL_MS = 5.0  # a timer this much later than due is a stall worth counting


def _watch_loop(stop_at: float) -> tuple[list[float], list[tuple[int, float, float]]]:
    """Start watching this gevent process: the loop's stalls (ms a STALL_TICK_S timer fired late, over
    STALL_MS) and the collector's pauses over 1 ms (generation, wall ms, CPU ms); lists filled as it runs."""
    import gc

    import gevent

    stalls: list[float] = []
    sweeps: list[tuple[int, float, float]] = []
    began = [0, 0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[:] = [time.monotonic_ns(), time.thread_time_ns()]
            return
        wall = (time.monotonic_ns() - began[0]) / 1e6
        if wall > 1:
            sweeps.append((info["generation"], wall, (time.thread_time_ns() - began[1]) / 1e6))

    def tick() -> None:
        while time.monotonic() < stop_at:
            t = time.monotonic_ns()
            gevent.sleep(STALL_TICK_S)
            late = (time.monotonic_ns() - t) / 1e6 - STALL_TICK_S * 1e3
            if late > STALL_MS:
                stalls.append(late)

    gc.callbacks.append(on_gc)
    gevent.spawn(tick)
    return stalls, sweeps


def run_fasthttp(url: str, streams: int, duration: float, tokens: int, out: Path) -> None:
    """Locust's FastHttpUser client, one user (and its connection) per stream, SSE lines read as they arrive."""
    import gevent
    from locust.contrib.fasthttp import FastHttpUser
    from locust.env import Environment

    class Bench(FastHttpUser):
        host = url
        network_timeout = 120.0
        connection_timeout = 5.0

    env = Environment(user_classes=[Bench])
    env.create_local_runner()  # FastHttpSession fires Locust's request event itself
    body = _prompt_body(tokens, 0)
    results: list[tuple[str, int | None, int]] = []
    stop_at = time.monotonic() + duration

    def user(i: int) -> None:
        bench = Bench(env)
        gevent.sleep(i * 0.002)
        while time.monotonic() < stop_at:
            rid = uuid.uuid4().hex
            first: int | None = None
            n = 0
            resp = bench.client.post("/v1/chat/completions", data=body.decode(), stream=True,
                                     headers={"x-request-id": rid, "content-type": "application/json"})
            stream = resp._response
            if stream is not None:
                while True:
                    line = stream.readline(b"\n")
                    if not line:
                        break
                    if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                        n += 1
                        if first is None:
                            first = time.monotonic_ns()
            results.append((rid, first, n))

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


def _start_testbed(tmp: Path, cores: set[int], streams: int) -> tuple[subprocess.Popen[bytes], str, Path]:
    import yaml

    cfg = {
        "profile": "fifo",
        "preset": "h100-llama8b",
        "replicas": max(4, -(-streams // 256)),  # 256 slots per replica: every stream runs, none queues
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
            "rushhour.testbed",
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


LABELS = {
    "compiled": "rushhour compiled + Locust stats",
    "interpreted": "rushhour interpreted + Locust st.",
    "greenlet": "rushhour per-greenlet (before)",
    "fasthttp": "Locust FastHttpUser",
}
# rushhour's rows: the reactor client, its hot modules compiled or not (the import rule: loadgen/compiled.py)
REACTOR_ENV = {"compiled": None, "interpreted": "0", "greenlet": "0"}


def _client_env(kind: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUSHHOUR_COMPILED"}
    value = REACTOR_ENV.get(kind)
    if value is not None:
        env["RUSHHOUR_COMPILED"] = value
    return env


def _run_client(kind: str, url: str, args: argparse.Namespace, tmp: Path, cores: list[int | None]) -> dict[str, Any]:
    """Run ``args.processes`` client processes at once (process i on ``cores[i]``) and merge their results."""
    procs = []
    client = "reactor" if kind in ("compiled", "interpreted") else kind
    for i, core in enumerate(cores):
        out = tmp / f"{kind}-{i}.json"
        cmd = [sys.executable, __file__, "--client", client, "--url", url, "--streams", str(args.streams),
               "--duration", str(args.duration), "--tokens", str(args.tokens), "--out", str(out)]
        if core is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", str(core), *cmd]  # pinned from its first instruction
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_client_env(kind))
        if core is not None:
            os.sched_setaffinity(proc.pid, {core})
        procs.append((proc, out))
    parts = []
    for proc, out in procs:
        proc.wait(timeout=args.duration * 4 + 180)
        parts.append(json.loads(out.read_text()))
    if kind == "compiled" and any(not str(p.get("code", "")).startswith("compiled") for p in parts):
        raise SystemExit(f"asked for the compiled wire client, ran {parts[0].get('code')}")
    merged = dict(parts[0])
    merged["results"] = [r for p in parts for r in p["results"]]
    merged["read_delays_ms"] = [d for p in parts for d in p.get("read_delays_ms") or []]
    merged["batches"] = {k: v for p in parts for k, v in (p.get("batches") or {}).items()}
    merged["stalls_ms"] = [d for p in parts for d in p.get("stalls_ms") or []]
    merged["gc_ms"] = [g for p in parts for g in p.get("gc_ms") or []]
    for key in ("cpu_s", "cpu_user_s", "cpu_sys_s", "streams", "passes"):
        merged[key] = sum(p.get(key) or 0 for p in parts)
    merged["wall_s"] = max(p["wall_s"] for p in parts)
    merged["cpu_util_max"] = max(p["cpu_s"] / p["wall_s"] for p in parts)
    return merged


def _ledger(path: Path) -> dict[str, dict[str, Any]]:
    rows = {}
    for line in path.read_text().splitlines():
        if line:
            row = json.loads(line)
            rows[row["request_id"]] = row
    return rows


def orchestrate(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One group of rows (``args.streams`` streams per process), printed; its rows."""
    cores = sorted(os.sched_getaffinity(0))
    # the testbed on the last core, each client process on a core of its own where there is one
    client_cores: list[int | None] = [cores[i % max(1, len(cores) - 1)] for i in range(args.processes)]
    server_cores = {cores[-1]} if len(cores) > 1 else set()
    if len(cores) == 1:
        client_cores = [None] * args.processes
    elif args.processes >= len(cores):
        # not enough cores to keep the testbed apart: clients one core each, the testbed wherever it fits
        client_cores = [cores[i % len(cores)] for i in range(args.processes)]
        server_cores = set()
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for kind in args.clients.split(","):
            (tmp / kind).mkdir()
            print(f"[{args.streams} streams] {kind} ...", file=sys.stderr, flush=True)
            load_before = os.getloadavg()[0]
            tb, url, ledger_path = _start_testbed(tmp / kind, server_cores, args.streams * args.processes)
            try:
                data = _run_client(kind, url, args, tmp / kind, client_cores)
            finally:
                tb.terminate()
                tb.wait(timeout=20)
            ledger = _ledger(ledger_path)
            by_rid = {
                rid: (first - ledger[rid]["first_token_ns"]) / 1e6
                for rid, first, _ in data["results"]
                if first is not None and rid in ledger and ledger[rid].get("first_token_ns")
            }
            errors = list(by_rid.values())
            # the kernel's stamp of a TCP read is its newest segment's: a first token read together with later
            # tokens (the loop came late) is stamped at a later token's arrival; read alone, at its own
            batches = data.get("batches") or {}
            alone = [e for rid, e in by_rid.items() if batches.get(rid) == 1]
            merged = [e for rid, e in by_rid.items() if batches.get(rid, 0) > 1]
            full_sweeps = [g for g in data.get("gc_ms") or [] if g[0] == 2]
            events = sum(n for _, _, n in data["results"])
            bursts = _burst_positions(data["results"], ledger)
            label = LABELS.get(kind) or f"aiohttp + {data.get('loop')}"
            rows.append(
                {
                    "client": label,
                    "kind": kind,
                    "code": data.get("code"),
                    "load_average": os.getloadavg()[0],
                    "load_average_before": load_before,
                    "processes": args.processes,
                    "streams": data["streams"],
                    "requests": len(data["results"]),
                    "events_per_s": events / data["wall_s"],
                    "cpu_us_per_event": data["cpu_s"] / max(1, events) * 1e6,
                    "cpu_util": data["cpu_s"] / data["wall_s"],
                    "cpu_util_max_process": data["cpu_util_max"],
                    "events_per_pass": events / data["passes"] if data.get("passes") else None,
                    # what stamping at recv would have added (the kernel stamp removes it): first-token reads
                    "read_delay_p50_ms": _pct(data["read_delays_ms"], 0.5) if data["read_delays_ms"] else None,
                    "read_delay_p99_ms": _pct(data["read_delays_ms"], 0.99) if data["read_delays_ms"] else None,
                    "ttft_err_p50_ms": _pct(errors, 0.5),
                    "ttft_err_p99_ms": _pct(errors, 0.99),
                    "ttft_err_max_ms": max(errors) if errors else float("nan"),
                    "first_read_alone": len(alone),
                    "first_read_alone_err_p99_ms": _pct(alone, 0.99) if alone else None,
                    "first_read_merged": len(merged),
                    "first_read_merged_err_p99_ms": _pct(merged, 0.99) if merged else None,
                    "loop_stalls": len(data.get("stalls_ms") or []),
                    "loop_stall_max_ms": max(data.get("stalls_ms") or [0.0]),
                    "full_sweeps": len(full_sweeps),
                    "full_sweep_max_ms": max((g[1] for g in full_sweeps), default=0.0),
                    "full_sweep_max_cpu_ms": max((g[2] for g in full_sweeps), default=0.0),
                    "cpu_user_s": data.get("cpu_user_s"),
                    "cpu_sys_s": data.get("cpu_sys_s"),
                    "ttft_err_by_burst_position": bursts,
                }
            )
    where = ", ".join(f"#{c}" for c in client_cores if c is not None) or "any"
    print(
        f"\n{args.streams} concurrent streams per client process × {args.processes} process(es), "
        f"{args.duration:.0f} s, {args.tokens} tokens per response, client core(s) {where}, "
        f"testbed on {sorted(server_cores) or 'any core'}; load average {os.getloadavg()[0]:.1f} at the end"
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
    ours = next((r for r in rows if r["kind"] == "compiled"), None) or next(
        (r for r in rows if r["kind"] == "interpreted"), None)
    if ours is not None:
        for peer in rows:
            if peer is not ours:
                cpu = ours["cpu_us_per_event"] / peer["cpu_us_per_event"]
                p99 = ours["ttft_err_p99_ms"] / peer["ttft_err_p99_ms"]
                print(f"{ours['kind']} / {peer['client']}: CPU per event ×{cpu:.2f}, TTFT error p99 ×{p99:.3g}")
        if ours["events_per_pass"]:
            print(f"{ours['kind']}: {ours['events_per_pass']:.1f} events per receive pass (one hub switch each)")
        if ours["first_read_alone"] or ours["first_read_merged"]:
            share = ours["first_read_merged"] / max(1, ours["first_read_alone"] + ours["first_read_merged"])
            print(f"{ours['kind']}: first tokens read alone: {ours['first_read_alone']}, TTFT error p99 "
                  f"{_ms(ours['first_read_alone_err_p99_ms'])}; read with later tokens (the loop came late; the "
                  f"kernel stamps a TCP read at its newest segment): {ours['first_read_merged']} ({share:.1%}), "
                  f"p99 {_ms(ours['first_read_merged_err_p99_ms'])}")
            print(f"{ours['kind']}: loop stalls over {STALL_MS:.0f} ms: {ours['loop_stalls']} (longest "
                  f"{ours['loop_stall_max_ms']:.1f} ms); full collector sweeps: {ours['full_sweeps']} (longest "
                  f"{ours['full_sweep_max_ms']:.1f} ms, {ours['full_sweep_max_cpu_ms']:.1f} ms CPU); load average "
                  f"{ours['load_average_before']:.1f} before, {ours['load_average']:.1f} after")
        if ours["read_delay_p50_ms"] is not None:
            print(f"{ours['kind']}: first-token bytes were read {ours['read_delay_p50_ms']:.2f} ms (p50) / "
                  f"{ours['read_delay_p99_ms']:.2f} ms (p99) after the kernel received them: what a recv-time "
                  "stamp would have added")
    print("\nTTFT error (ms) by a request's position in its first-token burst (ledger first tokens < 1 ms apart):")
    for r in rows:
        cells = "  ".join(
            f"{b['positions']}: n={b['n']} p50={b['p50_ms']:.2f} p99={b['p99_ms']:.2f}"
            for b in r["ttft_err_by_burst_position"]
        )
        print(f"  {r['client']:<32}{cells}")
    return rows


def _run_tokenized(args: argparse.Namespace) -> list[dict[str, Any]]:
    """benchmarks/tokenized.py's no-agents and off-the-loop rows (the issue's 10 agents/s of 30k-token prompts)."""
    with tempfile.TemporaryDirectory() as tmpdir:
        out = Path(tmpdir) / "tokenized.json"
        print("[tokenized prompts] ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tokenized.py"), "--modes", "idle,off",
                        "--rate", "10", "--context", "30000", "--duration", str(args.duration), "--json", str(out)],
                       check=True, cwd=ROOT)
        rows: list[dict[str, Any]] = json.loads(out.read_text())
        return rows


def _verdict(value: float | None, bound: float) -> str:
    if value is None or value != value:
        return "not measured"
    return "met" if value <= bound else "NOT met"


def _print_goals(rows: list[dict[str, Any]], tokenized: list[dict[str, Any]] | None) -> None:
    """Issue #41's goals against this run's rows (the compiled client's; a goal whose row did not run says so)."""
    ours = {r["streams"] // max(1, r["processes"]): r for r in rows if r["kind"] == "compiled"}
    peer = {r["streams"] // max(1, r["processes"]): r for r in rows if r["kind"] == "aiohttp"}
    print("\nIssue #41's goals, this run (compiled client; load average at each row's end in brackets):")
    at1k = ours.get(1000)
    cpu = at1k["cpu_us_per_event"] if at1k else None
    print(f"  CPU per SSE event at 1,000 streams ≤ 10 µs: {'n/a' if cpu is None else f'{cpu:.1f} µs'}"
          f"{_load(at1k)} — {_verdict(cpu, 10.0)}")
    for n, row in sorted(ours.items()):
        ratio = row["cpu_us_per_event"] / peer[n]["cpu_us_per_event"] if n in peer else None
        print(f"  CPU per event ≤ 0.45× aiohttp + uvloop's, {n:,} streams: "
              f"{'n/a' if ratio is None else f'×{ratio:.2f}'} — {_verdict(ratio, 0.45)}")
    for n, bound in ((2000, 1.0), (4000, 5.0)):
        at = ours.get(n)
        p99 = at["ttft_err_p99_ms"] if at else None
        alone = (f"; first tokens read alone {_ms(at['first_read_alone_err_p99_ms'])}, with later tokens "
                 f"{at['first_read_merged']}") if at else ""
        print(f"  TTFT error p99 ≤ {bound:g} ms at {n:,} streams: {_ms(p99)}{alone}"
              f"{_load(at)} — {_verdict(p99, bound)}")
    print("  same records compiled and interpreted: tests/loadgen/test_wire_compiled.py (a test, not run here)")
    if tokenized is None:
        print("  tokenizer-exact 30k-token prompts, loop stall p99 ≤ 5 ms: not run (--tokenized)")
        return
    off = next((r for r in tokenized if r["mode"] == "off"), None)
    idle = next((r for r in tokenized if r["mode"] == "idle"), None)
    if off is None:
        print("  tokenizer-exact 30k-token prompts, loop stall p99 ≤ 5 ms: not measured")
        return
    floor = f", the machine's own {idle['stall_p99_ms']:.1f} ms" if idle else ""
    print(f"  tokenizer-exact 30k-token prompts at 10 agents/s, loop stall p99 ≤ 5 ms: {off['stall_p99_ms']:.1f} ms"
          f"{floor}; agents finished {off['agents_done_in_window']} of {off['agents']} "
          f"[{off['load_average_after']:.1f}] — {_verdict(off['stall_p99_ms'], 5.0)}")


def _load(row: dict[str, Any] | None) -> str:
    return f" [{row['load_average']:.1f}]" if row else ""


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="1000,2000,4000", help="streams per client process: a count or a list")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--processes", type=int, default=1, help="client processes at once, --streams each")
    ap.add_argument("--json", default=None, help="also write the table as JSON here")
    ap.add_argument("--tokenized", action="store_true",
                    help="then benchmarks/tokenized.py (10 agents/s, 30k-token contexts, --duration s): the stall goal")
    ap.add_argument("--clients", default="compiled,interpreted,fasthttp,aiohttp",
                    help="which clients, in this order (comma list)")
    ap.add_argument("--client", choices=("reactor", "greenlet", "fasthttp", "aiohttp"), default=None,
                    help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client is None:
        if "compiled" in args.clients.split(","):
            from rushhour.loadgen.compiled import WIRE

            WIRE.build(quiet=True)  # a no-op when the build of these sources is there
        rows = []
        for count in str(args.streams).split(","):
            rows += orchestrate(argparse.Namespace(**{**vars(args), "streams": int(count)}))
        tokenized = _run_tokenized(args) if args.tokenized else None
        _print_goals(rows, tokenized)
        if args.json:
            Path(args.json).write_text(json.dumps({"rows": rows, "tokenized": tokenized}, indent=2))
        return
    args.streams = int(args.streams)
    if args.client in ("reactor", "greenlet"):
        run_gevent(args.url, args.streams, args.duration, args.tokens, Path(args.out), reactor=args.client == "reactor")
    elif args.client == "fasthttp":
        run_fasthttp(args.url, args.streams, args.duration, args.tokens, Path(args.out))
    elif args.client == "aiohttp":
        run_aiohttp(args.url, args.streams, args.duration, args.tokens, Path(args.out))


if __name__ == "__main__":
    main()
