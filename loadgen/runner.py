"""``rushhour run``: start the testbed if asked, drive Locust, watch, stop, record.

The scenario comes prepared (``loadgen/prepare.py``: the command line's overrides and every check). This module
runs in the parent process and never imports locust or gevent: Locust (which monkey-patches for gevent on import)
runs as a subprocess with ``loadgen/engine/locustfile.py``; only the CLI (``rushhour``) imports it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from rich.markup import escape

from rushhour.loadgen import doomed, livescale, procs, runkey
from rushhour.loadgen.lifecycle import Lifecycle, Scrape, iso, new_manifest
from rushhour.loadgen.live import ShardTail, progress_line, render
from rushhour.loadgen.prepare import (
    STOP_LIMIT_FOUND,
    STOP_PRECISION,
    LiveExporter,
    OtlpSink,
    RunOptions,
    Watch,
    prepare,
)
from rushhour.loadgen.process_exit import EXIT_LOAD_LOST, cut_shares, killed_line, lost_shards
from rushhour.loadgen.runkey import new_run_id
from rushhour.loadgen.ship import ANCHOR_LEAD_S, WORKERS_LOG, read_anchor
from rushhour.loadgen.testbed_proc import TestbedError, TestbedProcess, child_env, stop_pid
from rushhour.loadgen.tiers import TierError
from rushhour.records.manifest import RunManifest, write_manifest
from rushhour.records.record import START_FAILED_MARK, Anchor, is_disk_full, register_secret, shard_paths
from rushhour.scenarios.model import Route, Scenario

EXIT_OK, EXIT_STARTUP, EXIT_INTERRUPTED = 0, 2, 130  # 130: Ctrl-C or SIGTERM of the runner only
EXIT_DISK_FULL = 2  # the run could not be recorded in full: nothing to judge
EXIT_DOOMED = 2  # every attempt failed alike (wrong model, key, address): the run could not measure (invalid)
LOCUST_DISK_FULL = 4  # exit code of a load process whose shard hit a full disk (loadgen/engine/locustfile.py)
# Space set aside in every run folder and given back when the disk fills up, so that the final run.json
# can still be written (a full disk otherwise leaves an empty run.json.tmp and no stop reason).
RESERVE_FILE = ".reserve"
RESERVE_BYTES = 512 * 1024
LOCAL_START_S = 120.0  # a local Locust that has not started its test (every process connected) by then never will
STOP_GRACE_S = 15.0
# Locust's own --run-time cap is 20 s past the run's end; if it is still running this long after the
# end, it has overrun (a stuck process): it gets SIGTERM, then SIGKILL after STOP_GRACE_S.
OVERRUN_MARGIN_S = 40.0
PROGRESS_EVERY_S = 5.0  # off a terminal (a CI log): a progress line this often instead of the live table
LOCUSTFILE = Path(__file__).parent / "engine" / "locustfile.py"  # the Locust child (loadgen/engine/)


class _GuardedFeed:
    """A live listener (the metrics endpoint, the OTLP export) behind a guard: if it breaks it stops being fed, and
    the run goes on (it only watches); run.json's ``<name>_error`` and a warning say so."""

    def __init__(self, inner: LiveExporter | OtlpSink, ctx: RunContext, name: str = "live_metrics",
                 what: str = "the live metrics") -> None:
        self.inner, self.ctx, self.broken, self.name, self.what = inner, ctx, False, name, what

    def feed(self, record: dict[str, Any], shard: str = "") -> None:
        if self.broken:
            return
        try:
            self.inner.feed(record, shard)
        except Exception as exc:  # a courtesy: never the reason a run is lost
            self.broken = True
            self.ctx.manifest.extra[f"{self.name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            self.ctx.say(f"[yellow]warning:[/] {self.what} stopped ({escape(type(exc).__name__)}); "
                         "the run goes on to its end")


class _GuardedWatch:
    """The watcher behind a guard: if it breaks, the run goes on to its end (the gate then judges it whole)
    and run.json's ``abort_watch_error`` and a warning say that no early abort was watched from then on."""

    def __init__(self, inner: Watch, ctx: RunContext) -> None:
        self.inner, self.ctx, self.broken = inner, ctx, False

    def _break(self, exc: Exception) -> None:
        self.broken = True
        self.ctx.manifest.extra["abort_watch_error"] = f"{type(exc).__name__}: {exc}"[:300]
        self.ctx.say(f"[yellow]warning:[/] the early-abort watcher failed ({escape(type(exc).__name__)}); "
                     "the run goes on to its end")

    def feed(self, record: dict[str, Any], shard: str = "") -> None:
        if not self.broken:
            try:
                self.inner.feed(record, shard)
            except Exception as exc:  # a courtesy that saves time: never the reason a run is lost
                self._break(exc)

    def look(self, elapsed_s: float) -> dict[str, Any] | None:
        if self.broken:
            return None
        try:
            return self.inner.look(elapsed_s)
        except Exception as exc:
            self._break(exc)
            return None


ABORT_LOOK_EVERY_S = 2.0  # how often the watcher is asked (each look re-sorts a tier's latencies)
LIMIT_LOOK_EVERY_S = 1.0  # how often the find-limit controller is asked (its steps last many seconds)


@dataclass
class RunResult:
    run_dir: Path | None
    exit_code: int
    stop_reason: str | None = None


@dataclass
class RunContext:
    """One run's state in the parent: what it runs, where it records, what it started, where it is."""

    scenario: Scenario
    options: RunOptions
    run_dir: Path
    manifest: RunManifest
    sigs: _Signals
    console: Any = None
    testbeds: dict[str, TestbedProcess] = field(default_factory=dict)  # route name -> its testbed, primary first
    stage: str = "start-up"  # where the run is, for an interrupt or a full disk: "calibration", "the load", …

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def life(self) -> Lifecycle:
        """The run's lifecycle steps on its run.json (loadgen/lifecycle.py), as a user's locustfile takes them."""
        return Lifecycle(self.run_dir, self.manifest)

    def save(self) -> None:
        """Write ``run.json`` as it stands now (atomically)."""
        write_manifest(self.run_dir, self.manifest)

    def say(self, text: str) -> None:
        _say(self.console, text)

    def fail_startup(self, error: str) -> RunResult:
        """Finish ``run.json`` as a start-up error and say it in one line."""
        self.manifest.stop_reason, self.manifest.error, self.manifest.ended_at = "startup_error", error[:2000], iso()
        self.save()
        self.say(f"[bold red]error:[/] {escape(error)}")
        return RunResult(self.run_dir, EXIT_STARTUP, "startup_error")


def run_scenario(name_or_path: str | Path, options: RunOptions, console: Any = None) -> RunResult:
    """Run one scenario end to end; raises ``ScenarioError``/``FileNotFoundError`` for bad input."""
    scenario = prepare(name_or_path, options)
    from rushhour.loadgen.walltime import wall_time

    planned = wall_time(scenario, options.expect_workers or options.processes, bool(options.expect_workers)).line()
    if options.dry_run:
        return _dry_run(scenario, console, options.dry_run_notes, planned)
    _say(console, planned)  # the whole run's wall time, up front: a CI job's timeout or a user's wait
    run_id = new_run_id()
    run_dir = (Path(options.out_dir) / run_id).resolve()
    try:
        (run_dir / "records").mkdir(parents=True)
        _reserve(run_dir)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        _remove_empty(run_dir)
        _say(console, f"[bold red]error:[/] no space left on the device holding {escape(str(options.out_dir))}: "
                      "nothing was started")
        return RunResult(None, EXIT_DISK_FULL, "disk_full")
    manifest = new_manifest(run_id, scenario, str(name_or_path), scenario.target.url,
                            processes=options.expect_workers or options.processes, duration_s=scenario.duration_s,
                            drain_s=scenario.drain_s)
    # From here on a run folder exists: SIGINT/SIGTERM must end in a finished run.json, never a bare exit.
    # Until the load starts the signal raises ``_Interrupted`` (testbed start-up and calibration block);
    # ``_drive`` installs its own handler that forwards the stop to Locust.
    before = set(procs.descendants(os.getpid()))  # children of ours that this run did not start (tests, a parent tool)
    sigs = _Signals(raising=True)
    ctx = RunContext(scenario, options, run_dir, manifest, sigs, console)
    try:
        with sigs:
            try:
                return _start_and_drive(ctx)
            except _Interrupted:
                sigs.raising = False  # a second signal while we clean up only counts
                _stop_started(ctx.testbeds, before)
                manifest.stop_reason, manifest.ended_at, manifest.interrupted_during = "interrupted", iso(), ctx.stage
                ctx.save()
                ctx.say(f"interrupted during {ctx.stage}; partial run in {run_dir}")
                return RunResult(run_dir, EXIT_INTERRUPTED, "interrupted")
            except OSError as exc:
                if not is_disk_full(exc):
                    raise
                sigs.raising = False
                _stop_started(ctx.testbeds, before)
                return _disk_full(ctx, exc)
    finally:
        for tb in reversed(list(ctx.testbeds.values())):  # every testbed we started, by its PID
            tb.stop()
        _release(run_dir)


def _start_and_drive(ctx: RunContext) -> RunResult:
    """Start the testbeds, calibrate, take the anchor and drive the load (``ctx.stage``: where we are)."""
    scenario, run_dir, manifest, testbeds = ctx.scenario, ctx.run_dir, ctx.manifest, ctx.testbeds
    target_url = scenario.target.url
    starts: list[tuple[str, Route | None]] = []
    if scenario.target.is_testbed:
        starts.append(("primary", None))
    starts += [(r.name, r) for r in scenario.resilience.fallback if r.url == "testbed"]
    for name, route in starts:
        ctx.stage = "testbed start-up"
        ctx.say("starting the testbed …" if route is None else f"starting the testbed of route {name} …")
        try:
            testbeds[name] = TestbedProcess.start(scenario, run_dir, route=route)
        except TestbedError as exc:
            return ctx.fail_startup(str(exc))
    ctx.stage = "start-up"
    if "primary" in testbeds:
        testbed = testbeds["primary"]
        target_url = testbed.url
        manifest.testbed_port, manifest.testbed_url = testbed.port, testbed.url
        manifest.testbed_ledger, manifest.testbed_config = str(testbed.ledger), str(testbed.config_path)
        manifest.testbed_pid = testbed.proc.pid
    route_urls = {"primary": target_url}
    for fb in scenario.resilience.fallback:
        route_urls[fb.name] = testbeds[fb.name].url if fb.name in testbeds else fb.url
    manifest.route_urls = route_urls
    manifest.testbeds = {
        name: {
            "url": tb.url,
            "port": tb.port,
            "pid": tb.proc.pid,
            "ledger": str(tb.ledger),
            "config": str(tb.config_path),
            "log": str(tb.log_path),
        }
        for name, tb in testbeds.items()
    }
    ctx.save()
    info = ctx.life.calibrate(scenario, lambda sizes: _calibrate(ctx, target_url, len(sizes)))
    # the probes go to the primary alone: with fallback routes the load may still be served (its watch judges)
    if info is not None and not ctx.options.keep_going and not info.get("served") and not scenario.resilience.fallback:
        found = doomed.judge_attempts(_calibration_records(run_dir), doomed.CALIBRATION_MIN)
        if found is not None:
            return _stop_doomed(ctx, {**found, "at_s": None, "during": "calibration"}, target_url)
    manifest.resolved_target_url = target_url
    if ctx.options.after_calibration is not None:
        ctx.options.after_calibration()
    ctx.stage = "the load"
    try:
        return _drive(ctx, route_urls)
    finally:
        ctx.sigs.raising = False  # _drive has recorded its own stop; a late signal must not rewrite it


def _calibration_records(run_dir: Path) -> list[dict[str, Any]]:
    """The calibration probes' request lines (their own shard), in the order they were sent."""
    from rushhour.records.record import read_shard

    out: list[dict[str, Any]] = []
    for path in shard_paths(run_dir):
        if path.name.endswith("-calibration.jsonl"):
            out += [line for line in read_shard(path).lines if line.get("kind") == "request"]
    return out


MODELS_TIMEOUT_S = 3.0  # GET /v1/models when the server says the model is unknown: a courtesy, never a wait


def _name_models(scenario: Scenario, target_url: str, found: dict[str, Any]) -> dict[str, Any]:
    """The doom decision with the target's served models (``GET /v1/models``) when it says the model is unknown."""
    from rushhour.loadgen.diagnose import served_models
    from rushhour.loadgen.tiers import credential
    from rushhour.records.record import short_text

    if not doomed.Failure(int(found["status"]), str(found["error"])).model_not_found:
        return found
    try:
        key = credential(scenario.tiers[0])
    except TierError:
        key = None
    names, problem = served_models(target_url, key, timeout_s=MODELS_TIMEOUT_S)
    # the peer's ids are hostile text like any answer: cleaned and cut before they reach a line or run.json
    clean = [text for name in names[:100] if (text := short_text(name, 120))]
    return doomed.with_models(found, None if problem else clean, scenario.target.model)


def _stop_doomed(ctx: RunContext, found: dict[str, Any], target_url: str) -> RunResult:
    """Calibration found the run doomed: no load is started; run.json says why, in the server's words."""
    manifest = ctx.manifest
    manifest.abort = _name_models(ctx.scenario, target_url, found)
    ctx.life.finish(doomed.STOP_DOOMED)
    manifest.resolved_target_url = target_url
    ctx.save()
    ctx.say(f"[bold red]error:[/] {escape(manifest.abort['message'])}")
    ctx.say("no load was sent: every calibration probe failed alike (fail fast; `--keep-going` runs the load anyway)")
    return RunResult(ctx.run_dir, EXIT_DOOMED, doomed.STOP_DOOMED)


def _set_anchor(ctx: RunContext, anchor: Anchor) -> str | None:
    """Record the run's anchor and put the testbeds' faults on its clock; an error text, or None."""
    try:  # faults count from the run's t = 0, not from each testbed's start
        for name, tb in ctx.testbeds.items():
            ctx.manifest.testbeds[name]["faults"] = tb.schedule_faults(anchor.mono_ns)
    except TestbedError as exc:
        return str(exc)
    ctx.life.anchor(anchor)
    return None


def _reserve(run_dir: Path) -> None:
    """Set ``RESERVE_BYTES`` aside in the run folder (really written, not a sparse file)."""
    fd = os.open(run_dir / RESERVE_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, bytes(RESERVE_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)


def _release(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (run_dir / RESERVE_FILE).unlink()


def _remove_empty(run_dir: Path) -> None:
    """Remove a run folder that holds nothing yet (the disk was full before the run began)."""
    _release(run_dir)
    for path in (run_dir / "records", run_dir):
        with contextlib.suppress(OSError):
            path.rmdir()


def _disk_full(ctx: RunContext, exc: OSError) -> RunResult:
    """The disk filled up: give the reserve back, finalise run.json with what is missing, say it in one line."""
    run_dir, manifest, stage = ctx.run_dir, ctx.manifest, ctx.stage
    _release(run_dir)
    anchor = manifest.mono_anchor_ns
    at_s = round((time.monotonic_ns() - anchor) / 1e9, 3) if anchor is not None else None
    ctx.life.finish("disk_full")
    manifest.error = f"no space left on the device holding {run_dir} ({exc.strerror or exc}) during {stage}"
    manifest.disk_full = {
        "during": stage,
        "at_s": at_s,
        "file": str(getattr(exc, "filename", None) or ""),
        "missing": "every record, log line and metrics sample after the disk filled up (the load was stopped there)",
    }
    try:
        ctx.save()
        final = "run.json is final"
    except OSError:
        final = "run.json could not be finalised either"
    when = f" at t = {at_s:.1f} s" if at_s is not None and at_s >= 0 else f" during {stage}"
    ctx.say(f"[bold red]error:[/] the disk holding {escape(str(run_dir))} is full{when}: the run stopped "
                  f"and its records end there ({final}; `rushhour audit` says what is missing)")
    return RunResult(run_dir, EXIT_DISK_FULL, "disk_full")


def _stop_started(testbeds: dict[str, TestbedProcess], before: set[int]) -> None:
    """After an interrupt: stop our testbeds, then any other process this run started, by PID."""
    for tb in reversed(list(testbeds.values())):
        tb.stop()
    left = {pid: p for pid, p in procs.descendants(os.getpid()).items() if pid not in before}
    procs.send(left, signal.SIGTERM)
    procs.reap(left)


CALIBRATION_TIMEOUT_S = 600.0


CALIBRATION_PROGRESS_EVERY_S = 10.0  # print "calibration: 3/10 probes …" at most this often


def _calibrate(ctx: RunContext, target_url: str, planned: int) -> dict[str, Any]:
    """Send the idle probes in a child process (gevent) *before* the run's anchor is taken.

    The probes go to the primary route one after another and are recorded in their own shard
    (``records/<host>-<pid>-calibration.jsonl``, persona ``calibration``, on that process's own
    anchor; the audit re-bases it, so the probes sit before t = 0). The load's schedule therefore
    never starts before the last probe has finished, however slow the target is. Each probe has
    short deadlines of its own and the child stops after the first one that times out or fails to
    connect (``loadgen.engine.calibrate``), so an unresponsive target costs one probe, not minutes.

    Sets ``ctx.manifest.calibration`` (written as soon as the child runs: its PID, for clean-up)
    and returns it. ``_Interrupted`` (a signal) stops the child by PID (the probe in flight is
    recorded cancelled) and propagates, with ``ctx.stage`` still naming the calibration.
    """
    from rushhour.loadgen.probes import probe_scenario, read_progress

    run_dir, run_id, console = ctx.run_dir, ctx.run_id, ctx.console
    scenario = ctx.scenario
    ctx.stage = "calibration"
    timeouts = probe_scenario(scenario).resilience.timeouts
    _say(
        console,
        f"calibration: {planned} idle probes before the load (each: first token within {timeouts.ttft_s:g} s, "
        f"at most {timeouts.total_s:g} s) …",
    )
    cmd = [
        sys.executable,
        "-m",
        "rushhour.loadgen.engine.calibrate",
        "--run-dir",
        str(run_dir),
        "--run-id",
        run_id,
        "--scenario",
        str(run_dir / "run.json"),
        "--target",
        target_url,
    ]
    started = time.monotonic()
    log_path = run_dir / "calibration.log"
    info: dict[str, Any] = {}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=child_env()
        )
        try:
            info = ctx.manifest.calibration = {"pid": proc.pid}
            ctx.save()
            deadline = started + CALIBRATION_TIMEOUT_S
            said_at = started
            while proc.poll() is None and time.monotonic() < deadline:
                _wait_exit(proc, 0.1)
                if time.monotonic() - said_at >= CALIBRATION_PROGRESS_EVERY_S:
                    said_at = time.monotonic()
                    progress = read_progress(run_dir) or {}
                    _say(console, f"calibration: {progress.get('sent', 0)}/{planned} probes …")
        except _Interrupted:
            info["interrupted"] = True
            raise
        finally:
            code = stop_pid(proc, 5.0)  # on an interrupt too: SIGTERM, the child records its probe cancelled
            progress = read_progress(run_dir) or {}
            info.update(
                exit_code=code,
                seconds=round(time.monotonic() - started, 3),
                probes=planned,
                sent=progress.get("sent"),
                served=progress.get("served"),
                gave_up=progress.get("gave_up"),
            )
            ctx.save()
    if progress.get("gave_up"):
        _say(
            console,
            f"[yellow]calibration stopped after {progress.get('sent')} of {planned} probes:[/] {progress['gave_up']}; "
            "the target is not idle or not reachable, the audit uses its other inflation baseline",
        )
    elif code != 0:
        _say(console, f"[yellow]warning:[/] calibration exited {code}; see {log_path}")
    else:
        _say(console, f"calibration: {progress.get('served', 0)}/{planned} probes served")
    ctx.stage = "start-up"
    return info


def _dry_run(scenario: Scenario, console: Any, notes: Callable[[Scenario], list[str]] | None = None,
             planned: str = "") -> RunResult:
    from rushhour.loadgen.dryrun import plan, render_plan
    from rushhour.loadgen.probes import PROBE_OUTPUT_TOKENS

    result = plan(scenario)
    if console is not None:
        console.print(render_plan(result))
        for line in notes(scenario) if notes else []:
            console.print(line, markup=False, highlight=False)
        for warning in result.budget_warnings:
            console.print(f"[yellow]warning:[/] {warning}")
        cal = scenario.calibration
        if cal.probes > 0 and cal.prompt_tokens:
            sizes = ", ".join(str(n) for n in cal.prompt_tokens)
            console.print(
                f"calibration: {cal.probes * len(cal.prompt_tokens)} idle probes ({cal.probes} × prompt {sizes} "
                f"tokens, {PROBE_OUTPUT_TOKENS} output tokens) to the primary before the load; not counted by the "
                "budget"
            )
        if planned:
            console.print(planned)
    return RunResult(None, EXIT_OK, "dry_run")


def locust_command(
    options: RunOptions,
    run_dir: Path,
    run_id: str,
    anchor: Anchor | None,
    target_url: str,
    total_s: float,
    route_urls: dict[str, str] | None = None,
) -> list[str]:
    """The Locust command line: one driver user per process, a run-time cap with margin.

    ``anchor`` None: Locust's master takes it when its test starts (every process connected) and writes it
    to the run folder (``loadgen/ship.write_anchor``), as ``rushhour run`` wants.
    """
    n = options.expect_workers or options.processes
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "-u",
        str(n),
        "-r",
        str(n),
        "-t",
        f"{int(total_s + ANCHOR_LEAD_S + 20)}s",
        "--loglevel",
        "WARNING",
        "--rh-run-dir",
        str(run_dir),
        "--rh-run-id",
        run_id,
        "--rh-scenario",
        str(run_dir / "run.json"),
        "--rh-target",
        target_url,
        "--rh-mono-anchor-ns",
        str(anchor.mono_ns if anchor else 0),
        "--rh-wall-anchor-ns",
        str(anchor.wall_ns if anchor else 0),
        "--rh-anchor-host",
        socket.gethostname(),
        "--rh-workers",
        str(n),
        "--rh-anchor-at-start",
        "0" if anchor else "1",
    ]
    if route_urls:
        cmd += ["--rh-route-urls", json.dumps(route_urls, sort_keys=True)]
    if options.web:
        # Locust's own UI on a free loopback port; it stays up 60 s after the load ends
        cmd += ["--autostart", "--autoquit", "60", "--web-host", "127.0.0.1", "--web-port", str(_free_port())]
    else:
        cmd += ["--headless", "--only-summary"]
    if options.expect_workers:
        # remote workers (`rushhour worker --master HOST:PORT`) join Locust's own master; they get the
        # scenario and the anchor with the spawn message and ship their shards back (loadgen/ship.py)
        cmd += ["--master", "--expect-workers", str(n), "--expect-workers-max-wait", f"{options.workers_wait_s:g}",
                "--master-bind-host", options.master_bind, "--master-bind-port", str(options.master_port),
                "--rh-ship", "1"]
    elif n > 1:
        # Locust's master listens on 5557 by default: two runs at once (a sweep beside a CI gate, parallel
        # tests) would collide, so each run gets its own free loopback port for master and forked workers.
        port = str(_free_port())
        cmd += ["--processes", str(n), "--master-bind-host", "127.0.0.1", "--master-bind-port", port,
                "--master-host", "127.0.0.1", "--master-port", port]
    return cmd + list(options.locust_args)


def run_secret(options: RunOptions) -> str:
    """The secret of this run's master and workers: a fresh one for the processes it forks; with
    ``--expect-workers`` the one the remote workers were given (``RUSHHOUR_RUN_SECRET``)."""
    secret = os.environ.get(runkey.SECRET_ENV, "").strip() if options.expect_workers else runkey.new_secret()
    register_secret(secret)  # never in a record, a log line or a report
    return secret


def _free_port() -> int:
    """A loopback port nobody holds right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Interrupted(BaseException):
    """SIGINT/SIGTERM before the load started (``_Signals(raising=True)``)."""


class _Signals:
    """Catches SIGINT/SIGTERM in the runner so they are forwarded to Locust, not fatal here.

    With ``raising`` set, the first signal raises ``_Interrupted`` instead (start-up and
    calibration block in waits that a counter alone would not end); later ones only count.
    """

    def __init__(self, raising: bool = False) -> None:
        self.count = 0
        self.raising = raising
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave handlers alone
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.raising and self.count == 1:
            raise _Interrupted(signum)

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


WORKERS_GAVE_UP = "Gave up waiting for workers to connect"  # Locust's own log line
ANCHOR_POLL_S = 0.05  # how often the anchor file is looked for: a stat, while the run's t = 0 nears


def _wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``proc`` to exit; True when it has. Unlike a sleep it returns as soon as the
    child ends, so a run is not held up to one poll interval past its load (a signal still runs its handler)."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _await_anchor(ctx: RunContext, proc: subprocess.Popen[bytes], sigs: _Signals) -> Anchor | str | None:
    """Wait until Locust's master has all its workers and took the anchor.

    None: it exited, or we were stopped, or it never started; an error text: the testbeds' faults could not be
    put on the anchor's clock.
    """
    remote = bool(ctx.options.expect_workers)
    deadline = time.monotonic() + (ctx.options.workers_wait_s + 30 if remote else LOCAL_START_S)
    said = not remote  # a local run starts in seconds: nothing to say
    while proc.poll() is None and not sigs.count and time.monotonic() < deadline:
        got = read_anchor(ctx.run_dir)
        if got is not None:
            anchor = Anchor(*got)
            failed = _set_anchor(ctx, anchor)
            if failed is not None:
                if not remote:  # as before the load: the scenario's faults are part of what it measures
                    return failed
                ctx.say(f"[yellow]warning:[/] {escape(failed)}")
            return anchor
        if not said:
            said = True
            ctx.say(f"waiting for {ctx.options.expect_workers} worker(s) on "
                    f"{ctx.options.master_bind}:{ctx.options.master_port} "
                    f"(at most {ctx.options.workers_wait_s:g} s) …")
        time.sleep(ANCHOR_POLL_S)
    return None


def _drive(ctx: RunContext, route_urls: dict[str, str]) -> RunResult:
    """Run Locust to the end (or a stop), watch it live, and finish ``run.json`` with how it ended."""
    scenario, options, run_dir, run_id, manifest, console = (
        ctx.scenario, ctx.options, ctx.run_dir, ctx.run_id, ctx.manifest, ctx.console)
    total_s = scenario.duration_s + scenario.drain_s
    target_url = route_urls["primary"]
    cmd = locust_command(options, run_dir, run_id, None, target_url, total_s, route_urls)
    manifest.locust_command = cmd
    ctx.save()
    if options.web:
        port = cmd[cmd.index("--web-port") + 1]
        _say(console, f"Locust UI: http://127.0.0.1:{port} (open until 60 s after the load ends)")
    tail = ShardTail(run_dir)
    watch = (_GuardedWatch(options.watcher(scenario), ctx)
             if options.watcher and scenario.abort and scenario.abort.enabled else None)
    if watch is not None:
        tail.listeners.append(watch)
    exporter: LiveExporter | None = None
    if options.metrics_port is not None and options.live_metrics is not None:
        exporter = options.live_metrics(scenario)
        try:
            serving = exporter.serve(options.metrics_port, options.metrics_host)
        except OSError as exc:
            return ctx.fail_startup(f"--metrics-port {options.metrics_port}: cannot serve the live metrics on "
                                    f"{options.metrics_host} ({exc.strerror or exc})")
        manifest.extra["metrics_url"] = url = f"http://{options.metrics_host}:{serving}/metrics"
        _say(console, f"live metrics: {url}")
        tail.listeners.append(_GuardedFeed(exporter, ctx))
    otlp = options.otlp(scenario) if options.otlp is not None else None
    if otlp is not None:
        _say(console, f"OTLP export: one span per attempt and per-tier metrics to {otlp_endpoint(otlp)}")
    routes = ("primary", *(r.name for r in scenario.resilience.fallback))
    doom = None if options.keep_going else doomed.DoomWatch(routes=routes)  # fail fast: the first attempts alike
    if doom is not None:
        tail.listeners.append(doom)
    limit = None
    if options.limit is not None and scenario.find_limit is not None:
        try:
            limit = options.limit(scenario)
        except ValueError as exc:  # a prior (--find-limit-from) this scenario's load cannot take
            return ctx.fail_startup(str(exc))
        tail.listeners.append(limit)
        # the first level is set before any process starts: each reads it as it begins
        livescale.write_scale(run_dir, first := limit.start(0.0), limit.persona, 0)
        if first != scenario.find_limit.start:
            _say(console, f"find-limit: starting from the prior, load × {first:.4g}")
    until = options.until(scenario) if options.until is not None else None
    if until is not None:
        tail.listeners.append(_GuardedFeed(until, ctx))  # type: ignore[arg-type]
    precise: dict[str, Any] | None = None
    aborted: dict[str, Any] | None = None
    looked_at = limit_at = time.monotonic()
    log_path = run_dir / "locust.log"
    children: procs.Procs = {}  # Locust's own processes, held by identity
    forwarded_at: float | None = None
    # the live endpoint closes on every way out of the load (a start-up error, a lost worker, the end)
    serving_live = contextlib.closing(exporter) if exporter is not None else contextlib.nullcontext()
    with _Signals() as sigs, log_path.open("wb") as log, serving_live:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=child_env({runkey.SECRET_ENV: run_secret(options)}))
        manifest.locust_pid = proc.pid
        ctx.save()
        anchor = _await_anchor(ctx, proc, sigs)
        if isinstance(anchor, str):
            stop_pid(proc, STOP_GRACE_S)
            return ctx.fail_startup(anchor)
        if anchor is None:
            return _workers_missing(ctx, proc, sigs, log_path)
        scraper = ctx.life.scraper(scenario, target_url,
                                   lambda where: _scraper_thread(where, anchor, scenario.target.is_testbed))
        if otlp is not None:
            try:
                otlp.start(run_id, anchor.wall_ns)
                tail.listeners.append(_GuardedFeed(otlp, ctx, "otlp", "the OTLP export"))
            except Exception as exc:  # a courtesy: never the reason a run is lost
                manifest.extra["otlp"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                ctx.say(f"[yellow]warning:[/] the OTLP export could not start ({escape(type(exc).__name__)}); "
                        "the run goes on without it")
                otlp = None
        live = _live(console, options)
        if live is None:  # a CI log or a pipe: one line instead of the live table
            _say(console, f"load running: {scenario.duration_s:.0f} s of phases "
                          f"+ up to {scenario.drain_s:.0f} s drain …")
        hard_deadline = time.monotonic() + ANCHOR_LEAD_S + total_s + OVERRUN_MARGIN_S
        overran = False  # we had to stop Locust because it ran past its own end
        said_at = time.monotonic()
        killed_late_s: float | None = None  # seconds after the run's end at which we SIGKILLed it
        try:
            while proc.poll() is None:
                if _wait_exit(proc, 0.5):
                    break  # Locust has ended: what follows the loop reads its last records (its PID may be reused)
                procs.remember(children, procs.descendants(proc.pid))
                tail.poll()
                elapsed = (time.monotonic_ns() - anchor.mono_ns) / 1e9
                if live is not None:
                    live.update(render(tail, max(0.0, elapsed), total_s))
                elif time.monotonic() - said_at >= PROGRESS_EVERY_S:
                    said_at = time.monotonic()
                    _say(console, escape(progress_line(tail, max(0.0, elapsed), total_s)))
                if (watch is not None and aborted is None and forwarded_at is None
                        and time.monotonic() - looked_at >= ABORT_LOOK_EVERY_S):
                    looked_at = time.monotonic()
                    aborted = watch.look(elapsed)
                    if aborted is not None:  # stop the load as an interrupt would: in-flight requests end unfinished
                        manifest.abort = aborted
                        ctx.save()
                        _say(console, f"[bold red]aborting early[/] at {elapsed:.0f} s: {escape(aborted['message'])}")
                        _signal(proc.pid, signal.SIGTERM)
                        forwarded_at = time.monotonic()
                if (until is not None and precise is None and forwarded_at is None
                        and time.monotonic() - looked_at >= ABORT_LOOK_EVERY_S):
                    looked_at = time.monotonic()
                    precise = until.look(elapsed)
                    if precise is not None:  # known well enough: the rest of the schedule is not needed
                        manifest.extra["until"] = precise
                        ctx.save()
                        _say(console, f"stopping at {elapsed:.0f} s (--until): {escape(str(precise['message']))}")
                        _signal(proc.pid, signal.SIGTERM)
                        forwarded_at = time.monotonic()
                if (limit is not None and not limit.done and forwarded_at is None
                        and time.monotonic() - limit_at >= LIMIT_LOOK_EVERY_S):
                    limit_at = time.monotonic()
                    changed = limit.look(elapsed)
                    if changed is not None:
                        livescale.write_scale(run_dir, changed, limit.persona, int(elapsed * 1000))
                        _say(console, f"find-limit: load × {changed:.4g} at {elapsed:.0f} s")
                    if limit.done:  # the search is over: the rest of the schedule is not needed
                        _say(console, f"find-limit: done at {elapsed:.0f} s: {escape(limit.sentence())}")
                        _signal(proc.pid, signal.SIGTERM)
                        forwarded_at = time.monotonic()
                if doom is not None and aborted is None and forwarded_at is None and (
                        found := doom.look(elapsed)) is not None:
                    aborted = manifest.abort = _name_models(scenario, target_url, found)
                    ctx.save()
                    _say(console, f"[bold red]stopping at {elapsed:.0f} s (fail fast):[/] {escape(aborted['message'])}"
                                  " (`--keep-going` runs on)")
                    _signal(proc.pid, signal.SIGTERM)
                    forwarded_at = time.monotonic()
                if sigs.count and forwarded_at is None:
                    _say(console, "stopping: in-flight requests are recorded as cancelled …")
                    _signal(proc.pid, signal.SIGTERM)
                    forwarded_at = time.monotonic()
                elif sigs.count > 1 or (forwarded_at and time.monotonic() - forwarded_at > STOP_GRACE_S):
                    if overran and sigs.count == 0 and killed_late_s is None:
                        killed_late_s = (time.monotonic_ns() - anchor.mono_ns) / 1e9 - total_s
                    _kill_all(proc, children)
                elif time.monotonic() > hard_deadline and forwarded_at is None:
                    overran = True
                    _signal(proc.pid, signal.SIGTERM)
                    forwarded_at = time.monotonic()
        finally:
            if proc.poll() is None:
                stop_pid(proc, STOP_GRACE_S)
            procs.reap(children)  # Locust workers that outlived their master
            if exporter is not None:
                tail.poll()  # the drain's last records, then the endpoint closes with the load
            if live is not None:
                tail.poll()
                live.update(render(tail, total_s, total_s))
                live.stop()
            if scraper is not None:
                scraper.stop()
                problem = scraper.report()
                if problem:  # one line; brackets in it are text, not console markup
                    _say(console, "[yellow]warning:[/] " + escape(problem))
    tail.poll()
    if otlp is not None:
        _close_otlp(ctx, otlp)
    interrupted = sigs.count > 0
    stop_reason = "interrupted" if interrupted else (tail.stop_reason() or "completed")
    if aborted is not None and not interrupted:
        stop_reason = str(aborted["stop_reason"])
    if precise is not None and aborted is None and not interrupted:
        stop_reason = STOP_PRECISION
    elif until is not None:  # said, never silent: the cap came first
        manifest.extra["until"] = {"reached": False, "message": "the run's duration (the cap) ended before the "
                                   "figure was known as well as --until asked"}
    if limit is not None:
        # every step judged again on all its requests, the late ones included (the drain's last records)
        manifest.extra["find_limit"] = limit.result()
        if limit.done and aborted is None and not interrupted:
            stop_reason = STOP_LIMIT_FOUND
    if overran and not interrupted:  # a stuck Locust: what its shards say about the stop is not the story
        stop_reason = "overrun_killed" if killed_late_s is not None else "overrun_stopped"
    # a load process killed under it (out of memory, a signal from elsewhere): said by name, never taken for Ctrl-C
    death = None if interrupted or overran or forwarded_at is not None else load_death(
        proc.pid, proc.returncode, tail.events, remote=bool(options.expect_workers))
    if death is not None:
        stop_reason = death[0]
    shards = shard_paths(run_dir)
    load_shards = [p for p in shards if not p.name.endswith("-calibration.jsonl")]
    if proc.returncode == LOCUST_DISK_FULL or (scraper is not None and getattr(scraper, "write_error", None)):
        manifest.locust_exit_code = proc.returncode
        raise OSError(errno.ENOSPC, "No space left on device (the load could not be recorded)", str(run_dir))
    start_failure = None if interrupted else _start_failure(log_path)
    if start_failure and not any(_has_requests(p) for p in load_shards):
        stop_reason = "startup_error"  # a load process could not start: nothing ran, say so once
    ctx.life.finish(stop_reason, tail.events)
    manifest.locust_exit_code = proc.returncode
    if killed_late_s is not None:
        manifest.overrun_killed_after_end_s = round(killed_late_s, 1)
    manifest.auth = runkey.read_account(run_dir)
    if manifest.auth and manifest.auth.get("rejected_total"):
        _say(console, f"[yellow]warning:[/] the master dropped {manifest.auth['rejected_total']} message(s) not "
                      f"authenticated with the run's secret (run.json auth: {escape(str(manifest.auth['rejected']))})")
    if options.expect_workers:
        manifest.workers = workers_summary(run_dir, options)
        w = manifest.workers
        left = set(w["joined"]) - set(w["finished"]) - set(w["missing"]) - set(w["late"])
        if left and stop_reason == "completed":
            stop_reason = manifest.stop_reason = "worker_quit"  # stopped (SIGTERM, scale-down) before its share ended
    elif stop_reason == "completed" and (cut := cut_shares(tail.events)):
        # Locust's master stopped the test under the processes while the run went on (its workers missed
        # heartbeats on a loaded machine): their shares were cut, and the run idled to its end sending nothing
        stop_reason = manifest.stop_reason = "worker_quit"
        manifest.error = (f"{len(cut)} load process(es) stopped before their share ended ({', '.join(cut)}): "
                          "Locust's master stopped the test under them")
    manifest.generator_warning = tail.saturated()
    if stop_reason == "startup_error":
        manifest.error = start_failure
    elif death is not None:
        manifest.error = death[1]
    elif stop_reason == "template_error":
        manifest.error = tail.template_error()
    ctx.save()
    if stop_reason == "startup_error":
        _say(console, f"[bold red]error:[/] {escape(start_failure or '')}")
        return RunResult(run_dir, EXIT_STARTUP, "startup_error")
    if overran and not interrupted:
        how = (f"did not stop within {killed_late_s:.0f} s after the run's end; killed (SIGKILL)"
               if killed_late_s is not None else
               f"was still running {OVERRUN_MARGIN_S:.0f} s after the run's end; stopped (SIGTERM)")
        _say(console, f"[bold red]error:[/] Locust {how}; records may be missing; see {log_path}")
        _say(console, f"{tail.lines} lines in {len(shards)} shard(s); stop reason: {stop_reason}")
        return RunResult(run_dir, EXIT_LOAD_LOST, stop_reason)
    if stop_reason == "template_error" and not interrupted:  # an input error found mid-run: what ran is audited
        _say(console, f"[bold red]error:[/] {escape(manifest.error or '')}; the load stopped there")
        _say(console, f"{tail.lines} lines in {len(shards)} shard(s); stop reason: {stop_reason}")
        return RunResult(run_dir, EXIT_STARTUP, stop_reason)
    if death is not None:
        _say(console, f"[bold red]error:[/] {escape(death[1])}; its records end there; see {log_path}")
        _say(console, f"{tail.lines} lines in {len(shards)} shard(s); stop reason: {stop_reason}")
        return RunResult(run_dir, EXIT_LOAD_LOST, stop_reason)
    if not interrupted and not any(_has_requests(p) for p in load_shards) and proc.returncode not in (0, 1):
        _say(console, f"[bold red]error:[/] Locust failed to start (exit {proc.returncode}); see {log_path}")
        return RunResult(run_dir, EXIT_STARTUP, "startup_error")
    _say(console, f"{tail.lines} lines in {len(shards)} shard(s); stop reason: {stop_reason}")
    if stop_reason == doomed.STOP_DOOMED:
        return RunResult(run_dir, EXIT_DOOMED, stop_reason)
    return RunResult(run_dir, EXIT_INTERRUPTED if interrupted else EXIT_OK, stop_reason)


def load_death(pid: int, returncode: int | None, events: list[dict[str, Any]], *, remote: bool
               ) -> tuple[str, str] | None:
    """(stop reason, one line) when the Locust master was killed by a signal or a local load process died
    without stopping (its shard has no ``worker_stop``); None when every process ended by itself."""
    line = killed_line("Locust master" if not remote else "Locust master (its workers on other machines)", pid,
                       returncode)
    if line is not None:
        return "load_killed", line
    lost = [] if remote else lost_shards(events)  # remote workers: `worker_quit`, judged from workers.jsonl
    if lost:
        return "lost_worker", (f"{len(lost)} load process(es) died before the end without stopping (shard "
                               f"{', '.join(lost[:4])}): killed (out of memory? see `dmesg`) or crashed")
    return None


def _workers_missing(ctx: RunContext, proc: subprocess.Popen[bytes], sigs: _Signals, log_path: Path) -> RunResult:
    """The master ended (or was stopped) before its workers had all joined: one line, no load ran."""
    running = proc.poll() is None
    stop_pid(proc, STOP_GRACE_S)
    opts = ctx.options
    if sigs.count:
        waiting = "waiting for workers" if opts.expect_workers else "start-up"
        ctx.manifest.stop_reason, ctx.manifest.ended_at, ctx.manifest.interrupted_during = (
            "interrupted", iso(), waiting)
        ctx.save()
        ctx.say(f"interrupted {'while' if opts.expect_workers else 'during'} {waiting}; partial run in {ctx.run_dir}")
        return RunResult(ctx.run_dir, EXIT_INTERRUPTED, "interrupted")
    if not opts.expect_workers:
        ctx.manifest.locust_exit_code = proc.returncode
        return ctx.fail_startup(_start_failure(log_path) or (
            f"the load processes did not start within {LOCAL_START_S:.0f} s (no load was sent); see {log_path}"
            if running else f"Locust exited ({proc.returncode}) before the load started; see {log_path}"))
    joined = _joined(ctx.run_dir)
    host = socket.gethostname() if opts.master_bind in ("0.0.0.0", "::", "") else opts.master_bind
    error = (f"{joined} of {opts.expect_workers} worker(s) joined within {opts.workers_wait_s:g} s; start each with "
             f"`rushhour worker --master {host}:{opts.master_port} --target URL` and this run's {runkey.SECRET_ENV} "
             "(no load was sent)")
    if WORKERS_GAVE_UP not in log_path.read_text(errors="replace"):
        error = _start_failure(log_path) or (
            f"the Locust master exited ({proc.returncode}) before its workers joined; see {log_path}")
    return ctx.fail_startup(error)


def _joined(run_dir: Path) -> int:
    """How many workers the master saw ready (its ``workers.jsonl``)."""
    return len(workers_summary(run_dir, RunOptions())["joined"])


def workers_summary(run_dir: Path, options: RunOptions) -> dict[str, Any]:
    """run.json's ``workers``: what the master's ``workers.jsonl`` says about a multi-host run."""
    joined: set[str] = set()
    finished: set[str] = set()
    missing: set[str] = set()
    late: set[str] = set()  # joined after the shares were dealt (index >= expected): they have no share
    complete: list[str] = []
    incomplete: list[str] = []
    clocks: dict[str, dict[str, Any]] = {}  # each remote worker's clock offset, measured by the master
    with contextlib.suppress(OSError):
        for line in (run_dir / WORKERS_LOG).read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            event, worker = entry.get("event"), str(entry.get("worker"))
            index = entry.get("index")
            if event == "worker_state" and isinstance(index, int) and index >= options.expect_workers:
                late.add(worker)
            # joined = the master's watcher saw it at all: it polls every 0.5 s, and a worker that
            # joins just before the spawn may be first seen "spawning" or "running", never "ready"
            if event == "worker_state" and entry.get("state") not in ("gone", None):
                joined.add(worker)
            if event == "worker_state" and entry.get("state") == "missing":
                missing.add(worker)
            elif event == "worker_finished":
                joined.add(worker)
                finished.add(worker)
            elif event == "shard_complete":
                (complete if entry.get("ok") else incomplete).append(str(entry.get("shard")))
            elif event == "shard_incomplete":
                incomplete.append(str(entry.get("shard")))
            elif event == "clock":
                clocks[worker] = {k: entry.get(k) for k in ("offset_ns", "uncertainty_ns", "rounds")}
    return {"expected": options.expect_workers, "master": f"{options.master_bind}:{options.master_port}",
            "joined": sorted(joined), "finished": sorted(finished), "missing": sorted(missing - finished),
            "late": sorted(late), "clocks": clocks,
            "shards_complete": sorted(complete), "shards_incomplete": sorted(incomplete), "log": WORKERS_LOG}


def _start_failure(log_path: Path) -> str | None:
    """The line a load process wrote when it could not start (``START_FAILED_MARK``), if any."""
    mark = START_FAILED_MARK.encode()
    try:
        with log_path.open("rb") as handle:
            for line in handle:
                if mark in line:
                    return line[line.index(mark):].decode(errors="replace").strip()[:500]
    except OSError:
        return None
    return None


def _has_requests(path: Path) -> bool:
    with path.open("rb") as handle:
        return b'"kind":"request"' in handle.read(1 << 20) or path.stat().st_size > (1 << 20)


def _scraper_thread(where: Scrape, anchor: Anchor, testbed: bool) -> Any:
    """The lifecycle's scraper step as ``rushhour run`` takes it: a thread of the CLI (it parses off the load)."""
    from rushhour.loadgen.scrape import MetricsScraper, profile_filter, read_credential

    metrics = where.options
    token = None
    if metrics.credential is not None:  # checked before the run (check_mapping); never written anywhere
        token = read_credential(metrics.credential)
        register_secret(token)
    return MetricsScraper(where.url, metrics.interval_s, metrics.timeout_s, where.path, anchor,
                          keep=profile_filter(where.profile, testbed), token=token,
                          credential_name=metrics.credential).start()


def otlp_endpoint(sink: OtlpSink) -> str:
    """Where the sink sends, as it may be printed (its ``endpoint``, already without credentials)."""
    return str(getattr(sink, "endpoint", "") or "the endpoint of the OTEL_EXPORTER_OTLP_* variables")


def _close_otlp(ctx: RunContext, sink: OtlpSink) -> None:
    """End the OTLP export (a bounded wait) and say in run.json, and in a warning when any was lost, what it sent."""
    try:
        said = sink.close()
    except Exception as exc:  # a courtesy: never the reason a run is lost
        said = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    ctx.manifest.extra["otlp"] = said
    ctx.save()
    lost, error = said.get("lost"), said.get("error")
    if lost or error:
        ctx.say(f"[yellow]warning:[/] OTLP export: {said.get('exported', 0)} of {said.get('spans', '?')} spans "
                f"sent to {escape(str(said.get('endpoint', '?')))}, {lost if lost is not None else '?'} not sent"
                + (f" ({escape(str(error))})" if error else "") + "; the run and its records are whole")
    else:
        _say(ctx.console, f"OTLP export: {said.get('exported', 0)} spans sent")


def _live(console: Any, options: RunOptions) -> Any:
    show = options.live if options.live is not None else bool(console is not None and console.is_terminal)
    if not show or console is None:
        return None
    from rich.live import Live

    live = Live(console=console, refresh_per_second=2, transient=False)
    live.start()
    return live


def _signal(pid: int, sig: int) -> None:
    """Signal our own Locust child (a Popen not yet waited for: its PID cannot have been reused)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _kill_all(proc: subprocess.Popen[bytes], children: procs.Procs) -> None:
    _signal(proc.pid, signal.SIGKILL)
    procs.send(children, signal.SIGKILL)


def _say(console: Any, text: str) -> None:
    if console is not None:
        console.print(text, highlight=False)


__all__ = [
    "RunResult",
    "load_death",
    "locust_command",
    "run_scenario",
    "workers_summary",
]
