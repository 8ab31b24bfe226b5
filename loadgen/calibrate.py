"""Idle calibration probes, sent before a run's load starts: ``python -m loadgen.calibrate``.

The audit measures TTFT inflation against the unloaded TTFT of the same prompt size
(``audit/calibration.py``: served attempts of persona ``calibration``, median per log2 prompt-size
bin). The runner starts this module in a child process after the testbeds are up and *before* it
takes the run's anchor, so the probes can never overlap the load, however slow the target is.

For each size in ``calibration.prompt_tokens``, ``calibration.probes`` probes are sent one after
another to the primary route (tier = the scenario's first tier, its first tenant; a fresh prompt
text per probe, so no prefix cache helps it; a few output tokens). Each is recorded like any
attempt in ``records/<host>-<pid>-calibration.jsonl``, whose header carries this process's own
anchor (the audit re-bases it onto the run's, so the probes sit before t = 0). No retries, no
fallback, no breaker, no budget: a probe that fails is recorded and the next one is sent.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gevent

from loadgen import prompts
from loadgen.attempts import Logical, Pools, send_once
from loadgen.context import WorkerContext, build_routes
from loadgen.record import Anchor, ShardWriter
from scenarios import load_scenario
from scenarios.model import Scenario

CALIBRATION_PERSONA = "calibration"  # the audit's name for these probes (audit/fold.py)
PROBE_OUTPUT_TOKENS = 16
PROBE_GAP_S = 0.05  # between probes: the previous one's connection teardown must not overlap


def probe_plan(scenario: Scenario) -> list[int]:
    """The prompt size of every probe, in sending order (empty with ``probes: 0``)."""
    cal = scenario.calibration
    return [size for size in cal.prompt_tokens for _ in range(cal.probes)]


def run_probes(ctx: WorkerContext, sizes: list[int], gap_s: float = PROBE_GAP_S) -> int:
    """Send one probe per size, sequentially, on ``ctx.routes[0]``; returns how many were served."""
    tier = ctx.scenario.tiers[0]
    tenant = tier.tenant_ids[0]
    route = ctx.routes[0]
    pools = Pools(max_idle=1)
    served = 0
    try:
        for i, size in enumerate(sizes):
            conv = prompts.Conversation().with_user(prompts.text(f"calibration:{ctx.run_id}:{size}:{i}", size))
            req = Logical(tier.name, tenant, CALIBRATION_PERSONA, conv, PROBE_OUTPUT_TOKENS, ctx.now_ns())
            record = send_once(ctx, pools, req, route)
            served += int(200 <= record.status < 300 and record.complete and not record.in_band_error)
            if gap_s > 0 and i + 1 < len(sizes):
                gevent.sleep(gap_s)
    finally:
        pools.close()
    return served


def _load(path: Path) -> Scenario:
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        return Scenario.model_validate(data.get("scenario", data))
    return load_scenario(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadgen.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--scenario", required=True, help="run.json (resolved scenario) or a scenario YAML")
    parser.add_argument("--target", required=True, help="the primary route's base URL")
    args = parser.parse_args(argv)
    scenario = _load(Path(args.scenario))
    sizes = probe_plan(scenario)
    if not sizes:
        return 0
    anchor = Anchor.now()  # this shard's own anchor: the run's is taken after the probes
    writer = ShardWriter.for_process(Path(args.run_dir), run_id=args.run_id, anchor=anchor, role="calibration")
    routes = build_routes(scenario, args.target, testbed_url=args.target)[:1]
    ctx = WorkerContext(scenario, args.run_id, anchor, writer, routes)
    try:
        ctx.event("calibration_start", probes=len(sizes), prompt_tokens=list(scenario.calibration.prompt_tokens))
        served = run_probes(ctx, sizes)
        ctx.event("calibration_end", probes=len(sizes), served=served)
    finally:
        writer.close()
    print(f"calibration: {served}/{len(sizes)} probes served", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
