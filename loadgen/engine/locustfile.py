"""The Locust entry point: ``python -m locust -f loadgen/engine/locustfile.py`` (the runner builds the command).

One ``RushhourDriver`` user per Locust process drives that process's share of the scenario (the
runner asks for as many users as processes, and Locust places one on each worker). The run id,
run folder, scenario and clock anchor come from ``--rh-*`` options (or ``RUSHHOUR_*`` variables);
in distributed mode the master forwards them to every worker with the spawn message, and a master
started without a run id makes one, so the workers of one run always share it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from locust import User, events, task
from locust.env import Environment
from locust.exception import StopUser

from rushhour.loadgen import livescale, prompts, runkey, ship, tokens
from rushhour.loadgen.engine import sealed
from rushhour.loadgen.engine.bridge import request_event
from rushhour.loadgen.engine.context import WorkerContext, build_routes
from rushhour.loadgen.engine.guards import attach_guards as _attach_guards
from rushhour.loadgen.engine.lifecycle import (
    add_run_options,
    anchor_of,
    ensure_run_id,
    install_master_guards,
    run_dir_of,
    set_anchor,
    state_of,
    tolerate_slow_workers,
)
from rushhour.loadgen.engine.tokenize import off_loop
from rushhour.loadgen.engine.worker import Worker
from rushhour.loadgen.traces import trace_refs
from rushhour.records.manifest import scenario_of
from rushhour.records.record import (
    START_FAILED_MARK,
    Anchor,
    ShardWriter,
    is_disk_full,
    short_text,
)
from rushhour.scenarios import load_scenario
from rushhour.scenarios.model import Scenario

log = logging.getLogger("rushhour")
# every master<->worker frame is tagged with the run's secret (RUSHHOUR_RUN_SECRET): before Locust builds a runner
sealed.install()


@dataclass
class ChildState:
    """This Locust process's part of a ``rushhour run``, on its environment (``lifecycle.state_of``)."""

    workers: list[Worker] = field(default_factory=list)
    driving: bool = False  # this process has started driving its share (once)
    start_failed: str | None = None  # its one start-up error line: it never retries
    shippers: list[ship.Shipper] = field(default_factory=list)
    receivers: list[Any] = field(default_factory=list)  # the master's ship.Receiver or ship.FinishWatch
    ledgers: list[Any] = field(default_factory=list)  # the master's LedgerHost, when the budget is leased


def _state(environment: Any) -> ChildState:
    return state_of(environment, ChildState)


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    group = add_run_options(parser)
    group.add_argument(
        "--rh-scenario",
        env_var="RUSHHOUR_SCENARIO",
        default="",
        help="scenario YAML or a run.json holding the resolved scenario",
    )
    group.add_argument(
        "--rh-target", env_var="RUSHHOUR_TARGET", default="", help="target base URL (overrides the scenario)"
    )
    group.add_argument("--rh-workers", env_var="RUSHHOUR_WORKERS", default="0", help="Locust processes in the run")
    group.add_argument(
        "--rh-route-urls",
        env_var="RUSHHOUR_ROUTE_URLS",
        default="",
        help='JSON {route name: base URL}: where each route (its own testbed, for url: testbed) listens',
    )
    group.add_argument(
        "--rh-ship", env_var="RUSHHOUR_SHIP", default="0", help="1: workers ship their shards to the master"
    )
    group.add_argument(
        "--rh-anchor-at-start", env_var="RUSHHOUR_ANCHOR_AT_START", default="0",
        help="1: take the anchor when the test starts (every worker connected) and write it to the run folder",
    )
    group.add_argument(
        "--rh-scenario-json",
        env_var="RUSHHOUR_SCENARIO_JSON",
        default="",
        help="the resolved scenario (set by the master)",
    )


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    opts = environment.parsed_options
    if opts is None:
        return
    ensure_run_id(opts)  # a master (or a standalone Locust) without one makes it; workers get the master's
    state = _state(environment)
    shipping = getattr(opts, "master", False) and opts.rh_ship == "1"
    # `rushhour run` asks for the anchor at the test's start: taken here, before Locust has its workers (forked
    # and connected: over 4 s on a busy 2-core machine), the schedule's first second went out late
    # a single local process takes it later still, once its own context is built (_anchor_when_ready): nothing
    # else has to hear of it, so its lead only covers the runner's side
    at_ready = _alone(opts) and opts.rh_anchor_at_start == "1"
    at_start = not getattr(opts, "worker", False) and not at_ready and (shipping or opts.rh_anchor_at_start == "1")
    if int(opts.rh_wall_anchor_ns or 0) == 0 and not getattr(opts, "worker", False) and not (at_start or at_ready):
        anchor = Anchor.now()
        lead = int(ship.ANCHOR_LEAD_S * 1e9)  # let the workers connect before the schedule starts
        set_anchor(opts, anchor.mono_ns + lead, anchor.wall_ns + lead)
    if getattr(opts, "master", False) and environment.runner is not None:
        tolerate_slow_workers()
        _guard_master_loop(environment.runner)
        _install_master_parts(environment)
        expected = int(opts.rh_workers or 0) or int(getattr(opts, "expect_workers", 0) or 0)
        if opts.rh_ship != "1":  # the shipping master's Receiver does the same
            state.receivers.append(ship.FinishWatch(environment.runner, expected).install())
        ship.Refusals(environment.runner, run_dir_of(opts)).install()
    if getattr(opts, "master", False) and opts.rh_ship == "1" and environment.runner is not None:
        # remote workers need no copy of the scenario file, and ship their shards here
        if not opts.rh_scenario_json and opts.rh_scenario:
            opts.rh_scenario_json = json.dumps(_load(opts).model_dump(mode="json"))
        expected = int(opts.rh_workers or 0) or int(getattr(opts, "expect_workers", 0) or 0)
        state.receivers.append(ship.Receiver(environment.runner, run_dir_of(opts), expected).install())
    if at_start:
        environment.events.test_start.add_listener(_anchor_at_start)


def _guard_master_loop(runner: Any) -> None:
    """A message that makes one of Locust's own handlers raise (a worker's malformed heartbeat, stats) is
    dropped and logged: an exception there would end the master's receive loop, and with it the run's records."""
    handle = runner.handle_message

    def guarded(client_id: str, msg: Any) -> None:
        try:
            handle(client_id, msg)
        except Exception as exc:
            log.error("dropped a %s message from %s: %s", short_text(str(getattr(msg, "type", "?")), 40),
                      short_text(str(client_id), 80), short_text(f"{type(exc).__name__}: {exc}", 200))

    runner.handle_message = guarded


def _install_master_parts(environment: Environment) -> None:
    """A master holds the run's budget and relays its breakers' changes (one budget, one breaker per
    route for all its workers: loadgen/engine/lease.py, loadgen/engine/breaker_share.py)."""
    opts: Any = environment.parsed_options
    try:
        scenario = _load(opts)
    except Exception:  # the workers load it too, and fail with the one-line reason
        return
    workers = int(opts.rh_workers or 0) or int(getattr(opts, "expect_workers", 1) or 1)
    ledger = install_master_guards(environment.runner, scenario, run_dir_of(opts), workers)
    if ledger is not None:
        _state(environment).ledgers.append(ledger)


def _anchor_at_start(environment: Environment, **_: Any) -> None:
    """The master takes the run's anchor once its workers are all there (the spawn message carries it to them)
    and writes it for the runner."""
    opts = environment.parsed_options
    if opts is None or int(opts.rh_wall_anchor_ns or 0):
        return
    _take_anchor(opts, run_dir_of(opts), ship.ANCHOR_LEAD_S)


def _alone(opts: Any) -> bool:
    """Whether this is the run's only process (neither a master nor a worker)."""
    return not getattr(opts, "worker", False) and not getattr(opts, "master", False)


def _anchor_when_ready(opts: Any, run_dir: Path) -> None:
    """The only process of a `rushhour run` takes the run's anchor once its context is built, and writes it for
    the runner: the schedule starts ``LOCAL_ANCHOR_LEAD_S`` later, not a guessed lead after Locust's test start."""
    if not _alone(opts) or getattr(opts, "rh_anchor_at_start", "0") != "1" or int(opts.rh_wall_anchor_ns or 0):
        return
    _take_anchor(opts, run_dir, ship.LOCAL_ANCHOR_LEAD_S)


def _take_anchor(opts: Any, run_dir: Path, lead_s: float) -> None:
    """t = 0 is ``lead_s`` from now: into the options (the spawn message carries them) and the run folder's file."""
    now, lead = Anchor.now(), int(lead_s * 1e9)
    set_anchor(opts, now.mono_ns + lead, now.wall_ns + lead)
    ship.write_anchor(run_dir, now.mono_ns + lead, now.wall_ns + lead, lead)


def _load(opts: Any) -> Scenario:
    if getattr(opts, "rh_scenario_json", ""):
        return Scenario.model_validate(json.loads(opts.rh_scenario_json))
    path = Path(opts.rh_scenario)
    if path.suffix == ".json":
        return Scenario.model_validate(scenario_of(path))
    return load_scenario(path)


class RushhourDriver(User):
    """One per process: runs the process's share of every persona on the lean gevent wire client."""

    abstract = False
    fixed_count = 0

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.worker: Worker | None = None

    @task
    def drive(self) -> None:
        state = _state(self.environment)
        if state.driving or state.start_failed:
            # Locust moved another worker's user here (a rebalance): this process already drives its share
            # (or has failed to start, once, and must not retry in a loop); this user simply ends
            raise StopUser()
        state.driving = True
        # the share is driven in a greenlet of its own, not the user's: a rebalance (a worker joining
        # mid-run) stops a user on a live worker by killing its greenlet, which would cut that share;
        # a real stop (the master's quit or stop, a signal) cancels it through _close_all
        gevent.spawn(self._drive_share).join()

    def _drive_share(self) -> None:
        env = self.environment
        state = _state(env)
        opts = env.parsed_options
        runner = env.runner
        is_worker = bool(getattr(opts, "worker", False))
        # Locust's master gives every worker it ever saw its own index, never reused: a worker that joins
        # after the run's shares were dealt (a restarted one) has an index >= the run's worker count
        worker_index = int(getattr(runner, "worker_index", 0)) if is_worker else 0
        workers = int(opts.rh_workers or 0) or (int(getattr(opts, "expect_workers", 1) or 1) if is_worker else 1)
        remote = runner if is_worker and getattr(opts, "rh_ship", "0") == "1" else None
        try:
            if worker_index < 0:
                raise RuntimeError("the master gave this worker no index (a Locust master older than 2.x?)")
            ctx = _context(opts, worker_index, workers, remote, runner if is_worker else None)
        except Exception as exc:  # Locust would re-run the task at once, forever: fail this process once
            _fail_start(env, exc)
            return
        self.worker = Worker(ctx)
        state.workers.append(self.worker)
        ctx.on_attempt = request_event(env, lambda: ctx.stop_reason is not None)
        if remote is not None:
            state.shippers.append(ship.Shipper(remote, ctx.writer.path).start())
        try:
            if worker_index >= workers:  # its share does not exist: sending anything would add to the others'
                ctx.stop_reason = "late"
                ctx.event("late_worker", worker_index=worker_index, workers=workers)
                log.warning("this worker joined after the run's %d shares were dealt (index %d): it sends nothing",
                            workers, worker_index)
            else:
                self.worker.run()
        finally:
            self.worker.cancel()
            _write_stop(ctx)
            self.worker.close()
            if hasattr(ctx.budget, "finish"):  # what this process was leased and did not use goes back
                ctx.budget.finish()
            for shipper in state.shippers:
                shipper.finish()
        if ctx.writer.error is not None:  # a full disk: the runner finalises run.json with what is missing
            env.process_exit_code = LOCUST_DISK_FULL
            with contextlib.suppress(OSError):
                os.write(2, f"rushhour: cannot write records ({ctx.writer.error.strerror}); "
                            f"{ctx.writer.lost_lines} line(s) lost\n".encode())
        if is_worker:  # the master ends the run once every worker finished or went missing
            if ctx.stop_reason != "interrupted":  # stopped on its host (SIGTERM): not finished, the runner says so
                runner.send_message(ship.MSG_FINISHED, {"pid": os.getpid()})
            return
        runner.quit()  # a single process is done


LOCUST_DISK_FULL = 4  # loadgen/runner.py reads this exit code as a full disk


def _fail_start(env: Environment, exc: Exception) -> None:
    """One line on stderr (locust.log), a non-zero exit code, and this process quits; a worker tells
    its master first, which reports the line and ends the run (its share would never be sent)."""
    reason = short_text(f"{type(exc).__name__}: {exc}", 300)
    line = f"{START_FAILED_MARK} {reason}"
    _state(env).start_failed = line
    with contextlib.suppress(OSError):  # the log may sit on the full disk itself
        os.write(2, (line + "\n").encode(errors="replace"))
    env.process_exit_code = LOCUST_DISK_FULL if is_disk_full(exc) else 3
    if env.runner is not None and getattr(env.parsed_options, "worker", False):
        with contextlib.suppress(Exception):
            env.runner.send_message(ship.MSG_REFUSED, {"who": f"{socket.gethostname()}-{os.getpid()}",
                                                       "reason": reason})
            gevent.sleep(0.2)  # the message leaves before the quit (same socket, but quit closes it)
    if env.runner is not None:
        env.runner.quit()


def _context(opts: Any, worker_index: int, workers: int, remote: Any = None, master: Any = None) -> WorkerContext:
    scenario = _load(opts)
    missing = missing_files(scenario)
    if missing:  # before anything else: a worker that cannot send its share sends nothing
        raise FileNotFoundError(f"{'; '.join(missing)} on host {socket.gethostname()} (every worker needs the "
                                "files the scenario names, at the same path)")
    run_dir = run_dir_of(opts)
    clock: dict[str, Any] = {}
    role = ""
    if remote is not None:  # a worker of `rushhour worker`: its own spool, its clock measured against the master's
        if runkey.safe_run_id(opts.rh_run_id) is None:  # the master names the spool folder: never a path
            raise ValueError("the master sent a run id that is not a folder name: "
                             f"{short_text(str(opts.rh_run_id), 80)!r}")
        run_dir = ship.spool_dir(opts.rh_run_id)
        # the index in the name: a restarted container has the same host name and often the same PID
        role = f"w{worker_index}"
    route_urls = json.loads(opts.rh_route_urls) if getattr(opts, "rh_route_urls", "") else {}
    target = opts.rh_target or route_urls.get("primary") or scenario.target.url
    if remote is not None:  # the master chose these URLs: this worker's credentials go only where its host allows
        _check_allowed([target, *route_urls.values(), *(r.url or "" for r in scenario.resilience.fallback)])
    # routes first: a route that cannot be built must not leave an open shard behind
    try:
        routes = build_routes(scenario, target, testbed_url=target, route_urls=route_urls)
    except ValueError as exc:
        urls = sorted({target, *route_urls.values()})
        raise ValueError(f"cannot build a route to {', '.join(urls)}: {exc}") from None
    # the tokenizer before the shard too: a path that cannot be loaded is this process's one error
    prompts.use_tokenizer(off_loop(tokens.load(scenario.target.tokenizer)) if scenario.target.tokenizer else None)
    prompts.warm()  # before the anchor: building the prompt base lazily stalled the loop at the first arrival
    _anchor_when_ready(opts, run_dir)
    anchor = anchor_of(opts)
    if remote is not None:
        anchor, clock = _remote_anchor(opts, anchor, ship.clock_offset(remote))
    writer = ShardWriter.for_process(run_dir, run_id=opts.rh_run_id, anchor=anchor, header=clock, role=role)
    ctx = WorkerContext(scenario, opts.rh_run_id, anchor, writer, routes, worker_index, workers)
    if remote is None and livescale.scale_path(run_dir).exists():  # a find-limit run: the runner sets the load
        ctx.load_scale = livescale.LiveScale(run_dir)
    _attach_guards(ctx, master)
    ctx.event("worker_start", worker_index=worker_index, workers=workers, pid=os.getpid(), host=socket.gethostname())
    return ctx


def _check_allowed(urls: list[str]) -> None:
    """ValueError unless every URL's origin is in this worker's own allow-list (``rushhour worker --target``)."""
    allow = runkey.parse_allow(os.environ.get(runkey.TARGETS_ENV, ""))
    if not allow:
        raise ValueError(f"this worker has no allow-list of targets ({runkey.TARGETS_ENV}, `rushhour worker "
                         "--target URL`): it sends nothing, and no credential, where its master alone says")
    refused = runkey.not_allowed(sorted({u for u in urls if u and u != "testbed"}), allow)
    if refused:
        raise ValueError(f"the master asked for {', '.join(str(short_text(u, 120)) for u in refused)}, not in this "
                         f"worker's allow-list ({runkey.TARGETS_ENV}, `rushhour worker --target URL`)")


def missing_files(scenario: Scenario) -> list[str]:
    """The files the scenario names (traces, datasets, the tokenizer) that do not exist here, as
    ``field path`` texts (the master resolved them to absolute paths)."""
    out = [f"{ref.field} {ref.trace} does not exist" for ref in trace_refs(scenario.model_dump(mode="json"))
           if not Path(ref.trace).exists()]
    tokenizer = scenario.target.tokenizer
    if tokenizer and not Path(tokenizer).exists():
        out.append(f"target.tokenizer {tokenizer} does not exist")
    return out


def _remote_anchor(opts: Any, anchor: Anchor, offset: ship.ClockOffset | None) -> tuple[Anchor, dict[str, Any]]:
    """A remote worker's anchor and its shard header's clock fields (offset to the master, uncertainty)."""
    if offset is None:
        return anchor, {"clock_offset_ns": None, "clock_uncertainty_ns": None}
    clock = {"clock_offset_ns": offset.offset_ns, "clock_uncertainty_ns": offset.uncertainty_ns}
    if opts.rh_anchor_host and opts.rh_anchor_host == socket.gethostname():
        return anchor, clock  # the anchor's own monotonic clock (one kernel, e.g. network namespaces)
    # another machine: the master's wall anchor on this host's clock, corrected by the measured offset
    now = Anchor.now()
    wall = int(opts.rh_wall_anchor_ns or 0)
    return Anchor(now.mono_ns - (now.wall_ns + offset.offset_ns - wall), wall), clock


def _write_stop(ctx: WorkerContext) -> None:
    # the runner reads stop reasons from the shards' event lines
    if not ctx.writer.closed:
        if ctx.budget is not None:  # this process's share and what it used: the runner merges them (run.json)
            ctx.event("budget_usage", workers=ctx.workers, worker_index=ctx.worker_index, **ctx.budget.snapshot())
        ctx.event("worker_stop", reason=ctx.stop_reason or "interrupted")


def _close_all(environment: Environment | None = None, **_: Any) -> None:
    if environment is None:
        return
    state = _state(environment)
    _close_shards(state)
    for shipper in state.shippers:
        with contextlib.suppress(Exception):
            shipper.finish()


def _close_receivers(environment: Environment | None = None, **_: Any) -> None:
    if environment is None:
        return
    state = _state(environment)
    for receiver in state.receivers:  # the master: a worker that died leaves its shard open
        receiver.close()
    opts = getattr(environment, "parsed_options", None)
    if opts is not None and getattr(opts, "master", False):  # the frames it dropped: run.json's evidence
        sealed.write_account(run_dir_of(opts))
    for ledger in state.ledgers:  # the master: its budget account, for run.json
        ledger.write()


def _close_shards(state: ChildState) -> None:
    for worker in state.workers:
        try:
            if not worker.ctx.writer.closed:
                worker.ctx.stop_reason = worker.ctx.stop_reason or "interrupted"
                worker.cancel()
                _write_stop(worker.ctx)
            worker.close()
        except Exception:  # closing must go on for the other shards
            log.exception("closing a shard failed")


events.test_stop.add_listener(_close_all)
events.quitting.add_listener(_close_all)
events.quitting.add_listener(_close_receivers)
