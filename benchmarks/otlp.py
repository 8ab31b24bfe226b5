"""OTLP export benchmark: CPU per record of the CLI's shard tail with the export off, on, and the live metrics beside.

    .venv/bin/python benchmarks/otlp.py [--records 20000] [--repeats 3]

The export never runs in the load generator: the Locust processes write their shards as before (no line of the
wire or the attempt loop changed), and the CLI's shard tail, which already feeds the live metrics and the
early-abort watcher, turns each record into a span (audit/otlp.py). What it costs is that tail's CPU. One
synthetic shard of ``--records`` attempt records (the record's own serialisation) is read by a fresh tail for each
mode, interleaved over ``--repeats`` rounds, and the process's CPU (every thread: the span sender's included) is
divided by the records: ``off`` (no listener: the code path before this export, unchanged), ``live`` (the
``--metrics-port`` listener, the peer), ``otlp`` (the export to a real OTLP/HTTP receiver on loopback, in a
process of its own as a collector is; the export's encoding and sending counted) and ``both``. Ratios are to ``off``
in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rushhour.audit.live import LiveMetrics  # noqa: E402
from rushhour.audit.otlp import OtlpExport  # noqa: E402
from rushhour.loadgen.live import ShardTail  # noqa: E402
from rushhour.records.record import RECORDS_DIR  # noqa: E402
from rushhour.scenarios import load_scenario  # noqa: E402

MODES = ("off", "live", "otlp", "both")
# the receiver runs in its own process, as a collector would: its decoding is not the tail's CPU
RECEIVER = ("import sys, time; sys.path.insert(0, 'tests/e2e')\n"
            "from otlp_receiver import otlp_receiver\n"
            "with otlp_receiver() as got:\n    print(got.url, flush=True)\n    time.sleep(3600)\n")


def write_shard(run_dir: Path, count: int) -> None:
    """One shard of ``count`` attempt records: served, queue-full and timed-out ones, as the wire writes them."""
    (run_dir / RECORDS_DIR).mkdir(parents=True)
    lines = []
    for i in range(count):
        sent = 1_000_000 * i
        kind = i % 10
        rec: dict[str, Any] = {
            "run_id": "bench", "seq": i, "request_id": uuid.uuid4().hex, "logical_id": uuid.uuid4().hex,
            "tier": ("interactive", "batch")[i % 2], "tenant": "t", "persona": "chat", "attempt": 1,
            "route": "primary", "model": "testbed-model", "intended_ns": sent, "sent_ns": sent + 20_000,
            "kind": "request", "schema": 1, "prompt_tokens": 64, "prompt_tokens_intended": 64,
        }
        if kind < 7:
            rec.update(status=200, complete=True, headers_ns=sent + 5_000_000, first_token_ns=sent + 9_000_000,
                       last_token_ns=sent + 90_000_000, done_ns=sent + 91_000_000, tokens=16, output_tokens=16,
                       gateway_queue_ms=3.5)
        elif kind < 9:
            rec.update(status=429, reason="queue_full", done_ns=sent + 2_000_000)
        else:
            rec.update(client_timeout=True, done_ns=sent + 30_000_000_000)
        lines.append(json.dumps(rec))
    (run_dir / RECORDS_DIR / "w0.jsonl").write_text("\n".join(lines) + "\n")


def measure(run_dir: Path, mode: str, scenario: Any, url: str, count: int) -> float:
    """CPU seconds per record for one fresh tail over the shard in ``mode``."""
    tail = ShardTail(run_dir)
    export = None
    if mode in ("live", "both"):
        tail.listeners.append(LiveMetrics(scenario))
    if mode in ("otlp", "both"):
        export = OtlpExport(scenario, endpoint=url)
        export.start("bench", time.time_ns())
        tail.listeners.append(export)
    start = time.process_time()
    tail.poll()
    if export is not None:
        deadline = time.monotonic() + 120
        while export.counts["exported"] + export.counts["failed"] < count and time.monotonic() < deadline:
            time.sleep(0.05)  # the sender drains the burst (a run's tail feeds it 0.5 s at a time)
        said = export.close()
        assert said["exported"] == count, said  # every span reached the receiver before the clock stops
    return (time.process_time() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    scenario = load_scenario("demo")
    results: dict[str, list[float]] = {m: [] for m in MODES}
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert receiver.stdout is not None
        url = receiver.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp)
            write_shard(run_dir, args.records)
            measure(run_dir, "both", scenario, url, args.records)  # warm: imports, first connection
            for _ in range(args.repeats):
                for mode in MODES:
                    results[mode].append(measure(run_dir, mode, scenario, url, args.records))
    finally:
        receiver.kill()
        receiver.wait()
    off = statistics.median(results["off"])
    print(f"{args.records} records, {args.repeats} rounds; CPU per record of the CLI's shard tail (median):")
    for mode in MODES:
        value = statistics.median(results[mode])
        print(f"  {mode:<5} {value * 1e6:8.1f} µs   ×{value / off:5.2f} of off   "
              f"(rounds: {', '.join(f'{v * 1e6:.1f}' for v in results[mode])})")


if __name__ == "__main__":
    main()
