"""Idle calibration probes, sent before a run's load starts: ``python -m rushhour.loadgen.engine.calibrate``.

The audit measures TTFT inflation against the unloaded TTFT of the same prompt size
(``audit/calibration.py``: served attempts of persona ``calibration``, median per log2 prompt-size
bin). The runner starts this module in a child process after the testbeds are up and *before* it
takes the run's anchor, so the probes can never overlap the load, however slow the target is.

For each size in ``calibration.prompt_tokens``, ``calibration.probes`` probes are sent one after
another to the primary route (tier = the scenario's first tier, its first tenant; a fresh prompt
text per probe, so no prefix cache helps it; a few output tokens). Each is recorded like any
attempt in ``records/<host>-<pid>-calibration.jsonl``, whose header carries this process's own
anchor (the audit re-bases it onto the run's, so the probes sit before t = 0). No retries, no
fallback, no breaker, no budget: a probe that fails with an HTTP error is recorded and the next
one is sent.

Probes have short deadlines of their own (first token within ``min(ttft_s, PROBE_TTFT_S)``, the
whole answer within ``min(total_s, PROBE_TOTAL_S)``), not the scenario's, which may be many
minutes. The first probe that times out or gets a transport error ends the calibration: the target
is not idle or not reachable, so the audit falls back to its other inflation baseline. SIGTERM or
SIGINT cancels the probe in flight (recorded ``cancelled``) and ends the process with 130.

Progress goes to ``calibration.json`` in the run folder (rewritten after each probe; the runner
reads it): ``{"probes", "sent", "served", "gave_up", "interrupted", "done"}``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gevent

from rushhour.loadgen import prompts
from rushhour.loadgen.engine.attempts import Logical, Pools
from rushhour.loadgen.engine.context import WorkerContext, build_routes
from rushhour.loadgen.engine.personas.drive import send_once
from rushhour.loadgen.engine.wire.client import Cancelled
from rushhour.loadgen.probes import (
    CALIBRATION_PERSONA,
    PROBE_GAP_S,
    PROBE_OUTPUT_TOKENS,
    ProbeResult,
    probe_plan,
    probe_scenario,
    write_progress,
)
from rushhour.records.manifest import scenario_of
from rushhour.records.record import Anchor, RequestRecord, ShardWriter
from rushhour.scenarios import load_scenario
from rushhour.scenarios.model import Scenario

EXIT_INTERRUPTED = 130

def give_up_reason(record: RequestRecord) -> str | None:
    """Why this probe ends the calibration (a timeout or a transport error), or None."""
    if record.client_timeout:
        return f"probe timed out ({record.error or 'no answer'})"
    if record.transport_error:
        return f"transport error ({record.error or 'connection failed'})"
    return None


def run_probes(
    ctx: WorkerContext,
    sizes: list[int],
    gap_s: float = PROBE_GAP_S,
    on_probe: Any = None,
) -> ProbeResult:
    """Send one probe per size, sequentially, on ``ctx.routes[0]``.

    Stops after the first probe that times out or gets a transport error (``gave_up``), and on
    ``Cancelled`` (``interrupted``; the probe in flight is recorded cancelled). ``on_probe(result)``
    is called after each probe.
    """
    tier = ctx.scenario.tiers[0]
    tenant = tier.tenant_ids[0]
    route = ctx.routes[0]
    pools = Pools(max_idle=1)
    result = ProbeResult(probes=len(sizes))
    try:
        for i, size in enumerate(sizes):
            conv = prompts.Conversation().with_user(prompts.text(f"calibration:{ctx.run_id}:{size}:{i}", size))
            req = Logical(tier.name, tenant, CALIBRATION_PERSONA, conv, PROBE_OUTPUT_TOKENS, ctx.now_ns())
            result.sent += 1
            record = send_once(ctx, pools, req, route)
            result.served += int(200 <= record.status < 300 and record.complete and not record.in_band_error)
            result.gave_up = give_up_reason(record)
            if on_probe is not None:
                on_probe(result)
            if result.gave_up is not None:
                break
            if gap_s > 0 and i + 1 < len(sizes):
                gevent.sleep(gap_s)
    except Cancelled:
        result.interrupted = True
    finally:
        pools.close()
    return result


def _load(path: Path) -> Scenario:
    if path.suffix == ".json":
        return Scenario.model_validate(scenario_of(path))
    return load_scenario(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rushhour.loadgen.engine.calibrate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--scenario", required=True, help="run.json (resolved scenario) or a scenario YAML")
    parser.add_argument("--target", required=True, help="the primary route's base URL")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    scenario = probe_scenario(_load(Path(args.scenario)))
    sizes = probe_plan(scenario)
    if not sizes:
        return 0
    anchor = Anchor.now()  # this shard's own anchor: the run's is taken after the probes
    writer = ShardWriter.for_process(run_dir, run_id=args.run_id, anchor=anchor, role="calibration")
    routes = build_routes(scenario, args.target, testbed_url=args.target)[:1]
    ctx = WorkerContext(scenario, args.run_id, anchor, writer, routes)
    result = ProbeResult(probes=len(sizes))
    try:
        write_progress(run_dir, result)
        timeouts = scenario.resilience.timeouts
        ctx.event(
            "calibration_start",
            probes=len(sizes),
            prompt_tokens=list(scenario.calibration.prompt_tokens),
            ttft_s=timeouts.ttft_s,
            total_s=timeouts.total_s,
        )
        probes = gevent.spawn(run_probes, ctx, sizes, PROBE_GAP_S, lambda r: write_progress(run_dir, r))
        handlers = [
            gevent.signal_handler(sig, lambda: probes.kill(Cancelled, block=False))
            for sig in (signal.SIGTERM, signal.SIGINT)
        ]
        try:
            probes.join()
        finally:
            for handler in handlers:
                handler.cancel()
        if isinstance(probes.value, ProbeResult):
            result = probes.value
        else:  # killed before run_probes started
            result.interrupted = True
        result.done = True
        ctx.event("calibration_end", **asdict(result))
        write_progress(run_dir, result)
    finally:
        writer.close()
    how = "interrupted" if result.interrupted else (f"gave up: {result.gave_up}" if result.gave_up else "done")
    print(f"calibration: {result.served}/{result.probes} probes served, {result.sent} sent; {how}", file=sys.stderr)
    return EXIT_INTERRUPTED if result.interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
