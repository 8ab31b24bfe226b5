"""What both Locust entry points share: rushhour's options, the run's id, folder and anchor, the master's
guards, and each process's state, kept on Locust's environment rather than in module boxes.

``loadgen/engine/locustfile.py`` (the child of ``rushhour run``) and ``loadgen/engine/users.py`` (a user's
``locust -f``) differ in who plans the run (the runner or the user classes), not in these parts. The run's steps
on ``run.json`` (calibrate → anchor → scraper → finish) are the parent side's ``loadgen/lifecycle.py``, which the
runner and ``users`` both take.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rushhour.loadgen.runkey import new_run_id
from rushhour.records.record import Anchor
from rushhour.scenarios.model import Scenario

STATE_ATTR = "rushhour_state"  # the attribute of Locust's Environment that holds this process's state
S = TypeVar("S")


def state_of(environment: Any, make: Callable[[], S]) -> S:
    """This process's rushhour state for ``environment``, made on first use (one per Locust environment)."""
    state = vars(environment).get(STATE_ATTR)
    if state is None:
        state = make()
        setattr(environment, STATE_ATTR, state)
    return state


def add_run_options(parser: Any) -> Any:
    """rushhour's options every Locust process takes (a master forwards them to its workers); the group."""
    group = parser.add_argument_group("rushhour")
    group.add_argument("--rh-run-dir", env_var="RUSHHOUR_RUN_DIR", default="",
                       help="run folder for run.json and records/ (default runs/<run id>)")
    group.add_argument("--rh-run-id", env_var="RUSHHOUR_RUN_ID", default="",
                       help="run id (made by the master, or a standalone Locust, if empty)")
    group.add_argument("--rh-mono-anchor-ns", env_var="RUSHHOUR_MONO_ANCHOR_NS", default="0",
                       help="(set by the runner or master) monotonic anchor")
    group.add_argument("--rh-wall-anchor-ns", env_var="RUSHHOUR_WALL_ANCHOR_NS", default="0",
                       help="(set by the runner or master) wall-clock anchor")
    group.add_argument("--rh-anchor-host", env_var="RUSHHOUR_ANCHOR_HOST", default="",
                       help="(set by the runner or master) host whose monotonic clock the anchor belongs to")
    return group


def ensure_run_id(opts: Any) -> str:
    """The run's id: a master or a standalone Locust makes one when none was given (workers get the master's)."""
    if not opts.rh_run_id and not getattr(opts, "worker", False):
        opts.rh_run_id = new_run_id()
    return str(opts.rh_run_id)


def run_dir_of(opts: Any) -> Path:
    """The run folder the options name (default ``runs/<run id>``)."""
    return Path(opts.rh_run_dir or f"runs/{opts.rh_run_id}")


def anchor_of(opts: Any) -> Anchor:
    """This process's anchor, from the options the runner (or master) set."""
    return Anchor.of_run(int(opts.rh_mono_anchor_ns or 0), int(opts.rh_wall_anchor_ns or 0),
                         opts.rh_anchor_host or "", socket.gethostname())


def set_anchor(opts: Any, mono_ns: int, wall_ns: int) -> None:
    """Put the run's anchor (taken on this host) into the options the spawn message carries to the workers."""
    opts.rh_mono_anchor_ns, opts.rh_wall_anchor_ns = str(mono_ns), str(wall_ns)
    opts.rh_anchor_host = socket.gethostname()


MASTER_HEARTBEAT_LIVENESS = 10  # heartbeats (1 s apart) a worker may miss before its master calls it missing


def tolerate_slow_workers() -> None:
    """A master waits 10 missed heartbeats, not Locust's 3, before it calls a worker missing.

    Locust stops the test once its last worker is missing: workers whose loops were held 3 s at start-up (a loaded
    2-core machine) had every share cut, and the run idled to its end; a user's own master with two workers ended
    its test 5 s in, before its workers had sent anything. 10 s stays below the budget's reclaim round (15 s), which
    counts on it for the dead. Locust reads it at each heartbeat, so a master sets it before any worker connects."""
    from locust import runners  # the engine side only: Locust is imported by its processes, never the runner's

    runners.HEARTBEAT_LIVENESS = MASTER_HEARTBEAT_LIVENESS


def install_master_guards(runner: Any, scenario: Scenario, run_dir: Path, workers: int) -> Any | None:
    """A master relays its workers' breaker changes and holds the run's one budget, leased to them
    (loadgen/engine/breaker_share.py, loadgen/engine/lease.py); the budget's ``LedgerHost``, if any."""
    if scenario.resilience.breaker is not None:
        from rushhour.loadgen.engine.breaker_share import BreakerRelay

        BreakerRelay(runner, run_dir).install()
    if scenario.budget is None:
        return None
    from rushhour.loadgen.budget import BudgetGuard
    from rushhour.loadgen.engine.lease import LedgerHost
    from rushhour.loadgen.engine.ledger import Ledger

    limits = BudgetGuard(scenario.budget, leased=True).whole_limits()
    return LedgerHost(runner, Ledger(limits, max(1, workers)), run_dir).install()
