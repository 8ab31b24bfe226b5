"""`python -m testbed`: run the server until SIGTERM/SIGINT, then close the ledger cleanly."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
import tempfile
from pathlib import Path

from testbed.config import PROFILES, ConfigError, TestbedConfig, load_config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(prog="python -m testbed", description="rushhour embedded tiered LLM stack")
    ap.add_argument("--profile", choices=PROFILES, default=None)
    ap.add_argument("--config", default=None, help="testbed.yaml")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = ephemeral")
    ap.add_argument("--ledger", default=None, help="append the JSONL ledger here")
    ap.add_argument("--port-file", default=None, help="write the bound port here (atomically)")
    ap.add_argument("--preset", default=None)
    ap.add_argument("--replicas", type=int, default=None)
    ap.add_argument("--speed", type=float, default=None)
    return ap.parse_args(argv)


def write_port_file(path: str, port: int) -> None:
    """Write the port via a temp file + rename so readers never see a partial file."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent or Path("."), prefix=".port-")
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, target)


async def serve(cfg: TestbedConfig, args: argparse.Namespace) -> None:
    """Run until a stop signal."""
    from aiohttp import web

    from testbed.ledger import Ledger
    from testbed.server import build_app

    app = build_app(cfg, Ledger(args.ledger))
    # handler_cancellation: a client that disconnects while queued cancels its handler
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, backlog=4096)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    if args.port_file:
        write_port_file(args.port_file, port)
    # long-lived state is frozen out of the GC and young-generation sweeps made rarer: full collections
    # over thousands of live streams otherwise stall every replica's step timer for milliseconds
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 1000)
    print(f"testbed listening on http://{args.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.shutdown()  # on_shutdown ends in-flight requests in the ledger
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, profile=args.profile, preset=args.preset, replicas=args.replicas,
                          speed=args.speed)
    except (ConfigError, OSError) as exc:
        print(f"testbed: config error: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # optional speed-up
        pass
    asyncio.run(serve(cfg, args))
    return 0
