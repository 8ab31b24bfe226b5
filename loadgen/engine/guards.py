"""A Locust process's guards: the budget (whole, or leased from the master) and a breaker per route.

Shared by rushhour's own Locust child (``loadgen/engine/locustfile.py``) and the Locust-native users
(``loadgen/engine/users.py``): the same objects the attempt loop (``loadgen/flow/send.py``) consults.
"""

from __future__ import annotations

from typing import Any

from rushhour.loadgen.engine.context import WorkerContext
from rushhour.records.record import BreakerRecord


def attach_guards(ctx: WorkerContext, master: Any = None) -> None:
    """Budget guard and circuit breakers, when the scenario asks for them. ``master``: the worker's
    Locust runner when this process is one of a master's workers (the budget is then leased from it,
    and breaker changes travel through it)."""
    scenario = ctx.scenario
    from rushhour.loadgen.breaker import RouteBreaker
    from rushhour.loadgen.budget import BudgetGuard

    if scenario.budget is not None and master is not None:
        from rushhour.loadgen.engine.attempts import budget_reached
        from rushhour.loadgen.engine.lease import LeasedBudget

        guard = BudgetGuard(scenario.budget, workers=ctx.workers, worker_index=ctx.worker_index, leased=True)
        ctx.budget = LeasedBudget(guard, master).install()
        ctx.budget.on_reached_scope = lambda tier: budget_reached(ctx, tier)
    elif scenario.budget is not None:
        ctx.budget = BudgetGuard(scenario.budget)
    if scenario.resilience.breaker is not None:
        cfg = scenario.resilience.breaker
        share = None
        if master is not None:  # one breaker per route for the run: changes travel through the master
            from rushhour.loadgen.engine.breaker_share import BreakerShare

            share = BreakerShare(master, ctx.breakers, ctx.writer.path.stem).install()

        def on_change(route: str, old: str, new: str, cause: str | None) -> None:
            ctx.write(BreakerRecord(ctx.run_id, ctx.writer.next_seq(), ctx.now_ns(), route, new, old, cause))
            if share is not None:
                share.changed(route, new, cause)

        for route in ctx.routes:
            ctx.breakers[route.name] = RouteBreaker(route.name, cfg.fail_max, cfg.reset_timeout_s, on_change)


def usage_event(ctx: WorkerContext) -> None:
    """This process's share of the budget and what it used (an event line: run.json merges them), then
    whatever it was leased and did not use goes back to the master."""
    if ctx.budget is None or ctx.writer.closed:
        return
    ctx.event("budget_usage", workers=ctx.workers, worker_index=ctx.worker_index, **ctx.budget.snapshot())
    if hasattr(ctx.budget, "finish"):
        ctx.budget.finish()
