"""The probes of ``rushhour doctor``, sent from a child process: ``python -m rushhour.loadgen.engine.doctor``.

A handful of requests tell whether rushhour understands a stack: one streamed request per tier
(does it stream, end, report usage; is the tier's wire mapping accepted), a priority-polarity
trial under a small saturating load, and two deliberately bad requests (an impossible
``max_tokens``, an unknown model) whose error shapes the profile's rules must recognise. Every
attempt is written in the record format to a shard of the doctor's own folder, tagged by
``persona`` (``doctor-tier``, ``doctor-tools`` (one per route when a persona offers tools),
``doctor-filler``, ``doctor-polarity-<trial>-<high|low>``,
``doctor-error-<what>``); the parent (``audit.doctor``) classifies and judges them, so the doctor
sees exactly what a run's audit would see.

Like the calibration probes, this imports gevent and so runs in its own process, never in the CLI's.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import gevent

from rushhour.loadgen import prompts
from rushhour.loadgen.diagnose import FILLER_TIER, PLAN_FILE
from rushhour.loadgen.engine.attempts import Logical, Pools
from rushhour.loadgen.engine.context import RouteWire, WorkerContext, build_routes
from rushhour.loadgen.engine.personas.drive import send_once
from rushhour.records.record import Anchor, RequestRecord, ShardWriter
from rushhour.scenarios.model import Scenario

TIER_PROMPT_TOKENS = 64
TIER_OUTPUT_TOKENS = 16
FILLER_OUTPUT_TOKENS = 256
POLARITY_OUTPUT_TOKENS = 8
POLARITY_GAP_S = 0.02  # the first of a pair is sent this much earlier: FCFS would serve it first
FILLER_HEAD_START_S = 0.5  # fillers get this long to occupy the engine before the pair is sent
IMPOSSIBLE_MAX_TOKENS = 10**9
UNKNOWN_MODEL = "rushhour-doctor-no-such-model"


def _logical(ctx: WorkerContext, tier: str, tenant: str, persona: str, size: int, out: int, key: str,
             tools: list[dict[str, Any]] | None = None) -> Logical:
    conv = prompts.Conversation().with_user(prompts.text(f"doctor:{ctx.run_id}:{key}", size))
    return Logical(tier, tenant, persona, conv, out, ctx.now_ns(), tools=tools)


def _send(ctx: WorkerContext, route: RouteWire, req: Logical) -> RequestRecord:
    pools = Pools(max_idle=1)
    try:
        return send_once(ctx, pools, req, route)
    finally:
        pools.close()


def probe_tiers(ctx: WorkerContext, route: RouteWire) -> None:
    """One small streamed request per tier (first tenant), one after another."""
    for tier in ctx.scenario.tiers:
        if tier.name == FILLER_TIER:
            continue
        _send(
            ctx,
            route,
            _logical(
                ctx,
                tier.name,
                tier.tenant_ids[0],
                "doctor-tier",
                TIER_PROMPT_TOKENS,
                TIER_OUTPUT_TOKENS,
                f"tier:{tier.name}",
            ),
        )


def probe_polarity(ctx: WorkerContext, route: RouteWire, fillers: int) -> None:
    """Two trials, each under its own ``fillers`` long requests: a high/low pair sent 20 ms apart.

    The fillers carry the filler tier (``FILLER_TIER``, a priority halfway between the two, added by
    the parent), so a stack that honours the mapping serves the high request before the fillers and
    the low one after them, whichever was sent first; one that ignores priority serves both after
    the fillers, in send order or together; one with the polarity reversed serves low first.
    Trial ``a`` sends the low-tier request first, trial ``b`` the high-tier one.
    """
    tiers = sorted((t for t in ctx.scenario.tiers if t.name != FILLER_TIER), key=lambda t: t.priority)
    if len(tiers) < 2 or tiers[0].priority == tiers[-1].priority:
        return
    low, high = tiers[0], tiers[-1]
    filler = next((t for t in ctx.scenario.tiers if t.name == FILLER_TIER), low)
    for trial, first, second in (("a", low, high), ("b", high, low)):
        # staggered lengths: slots free one at a time, so each goes to the most urgent waiter (fillers
        # ending together would admit the pair together and hide the order)
        filler_jobs = [
            gevent.spawn(
                _send,
                ctx,
                route,
                _logical(
                    ctx,
                    filler.name,
                    filler.tenant_ids[0],
                    "doctor-filler",
                    TIER_PROMPT_TOKENS,
                    FILLER_OUTPUT_TOKENS * (i + 1) // fillers,
                    f"filler:{trial}:{i}",
                ),
            )
            for i in range(fillers)
        ]
        gevent.sleep(FILLER_HEAD_START_S)
        pair = []
        for tier in (first, second):
            role = "high" if tier is high else "low"
            req = _logical(
                ctx,
                tier.name,
                tier.tenant_ids[0],
                f"doctor-polarity-{trial}-{role}",
                TIER_PROMPT_TOKENS,
                POLARITY_OUTPUT_TOKENS,
                f"polarity:{trial}:{role}",
            )
            pair.append(gevent.spawn(_send, ctx, route, req))
            gevent.sleep(POLARITY_GAP_S)
        gevent.joinall(pair + filler_jobs)


def probe_errors(ctx: WorkerContext, route: RouteWire) -> None:
    """Two requests the stack must refuse: an impossible ``max_tokens`` and an unknown model."""
    tier = ctx.scenario.tiers[0]
    _send(
        ctx,
        route,
        _logical(
            ctx,
            tier.name,
            tier.tenant_ids[0],
            "doctor-error-max-tokens",
            TIER_PROMPT_TOKENS,
            IMPOSSIBLE_MAX_TOKENS,
            "error:max_tokens",
        ),
    )
    _send(
        ctx,
        replace(route, model=UNKNOWN_MODEL),
        _logical(
            ctx,
            tier.name,
            tier.tenant_ids[0],
            "doctor-error-model",
            TIER_PROMPT_TOKENS,
            TIER_OUTPUT_TOKENS,
            "error:model",
        ),
    )


def scenario_tools(scenario: Scenario) -> list[dict[str, Any]] | None:
    """The tools the scenario's personas offer (the first persona that offers any), or None."""
    for persona in scenario.personas:
        tools = getattr(persona, "tool_schemas", None)
        if tools:
            return list(tools)
    return None


def probe_tools(ctx: WorkerContext, routes: list[RouteWire]) -> None:
    """One small request offering the personas' tools on every route: does each stack accept tools at all?"""
    tools = scenario_tools(ctx.scenario)
    if not tools:
        return
    tier = ctx.scenario.tiers[0]
    for route in routes:
        if route.url == "testbed":  # a fallback to rushhour's own testbed: not a stack to diagnose
            continue
        _send(ctx, route, _logical(ctx, tier.name, tier.tenant_ids[0], "doctor-tools", TIER_PROMPT_TOKENS,
                                   TIER_OUTPUT_TOKENS, f"tools:{route.name}", tools=tools))


def run(ctx: WorkerContext, fillers: int) -> None:
    """Every probe, in order, on the primary route; the tools probe on every route."""
    route = ctx.routes[0]
    probe_tiers(ctx, route)
    probe_tools(ctx, ctx.routes)
    if fillers > 0:
        probe_polarity(ctx, route, fillers)
    probe_errors(ctx, route)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rushhour.loadgen.engine.doctor",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the doctor's folder (its plan file names the scenario)")
    args = parser.parse_args(argv)
    folder = Path(args.dir)
    plan: dict[str, Any] = json.loads((folder / PLAN_FILE).read_text())
    scenario = Scenario.model_validate(plan["scenario"])
    anchor = Anchor.now()
    writer = ShardWriter.for_process(folder, run_id=plan["run_id"], anchor=anchor, role="doctor")
    try:
        routes = build_routes(scenario, plan["target"])
        ctx = WorkerContext(scenario, plan["run_id"], anchor, writer, routes)
        run(ctx, int(plan.get("fillers", 0)))
    finally:
        writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
