"""A run's preparation, before any process starts: the command line's overrides and every check a scenario passes.

``rushhour run`` (``loadgen/runner.py``) prepares here, then drives the processes; the simulator (``sim/``) takes the
same overrides and checks without the runner. Parent side, no load started; pure but for the file checks (a
tokenizer, its chat template's trial render in a capped child, traces and datasets read, bounded) and the open-file
limit raised for the load processes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from rushhour.loadgen import runkey
from rushhour.loadgen.schedule import scale_phases
from rushhour.loadgen.tiers import TierError, map_tier
from rushhour.loadgen.traces import localise_traces
from rushhour.scenarios import ScenarioError, load_scenario
from rushhour.scenarios.loader import Problem, located, resolve_scenario_path
from rushhour.scenarios.model import PROFILES, Scenario, parse_duration
from rushhour.scenarios.names import did_you_mean


class Watch(Protocol):
    """The early-abort watcher (audit/early.py ``Watcher``): fed by the shard tail, asked to decide."""

    def feed(self, record: dict[str, Any], shard: str = "") -> None: ...

    def look(self, elapsed_s: float) -> dict[str, Any] | None: ...


class Limit(Protocol):
    """The find-limit controller (audit/limit.py ``LimitController``): fed by the shard tail, asked for the load."""

    done: bool
    persona: str | None

    def feed(self, record: dict[str, Any], shard: str = "") -> None: ...

    def start(self, now_s: float = 0.0) -> float: ...

    def look(self, now_s: float) -> float | None: ...

    def result(self) -> dict[str, Any]: ...

    def sentence(self) -> str: ...


class LiveExporter(Protocol):
    """The run's live figures (audit/live.py ``LiveMetrics``): fed by the shard tail, served over HTTP."""

    def feed(self, record: dict[str, Any], shard: str = "") -> None: ...

    def serve(self, port: int, host: str = "127.0.0.1") -> int: ...

    def close(self) -> None: ...


class OtlpSink(Protocol):
    """The run's attempts as spans over OTLP (audit/otlp.py ``OtlpExport``): fed by the shard tail, off the load."""

    def start(self, run_id: str, wall_anchor_ns: int) -> None: ...

    def feed(self, record: dict[str, Any], shard: str = "") -> None: ...

    def close(self) -> dict[str, Any]: ...


ABORT_MODES = ("hopeless", "saturation")
STOP_LIMIT_FOUND = "limit_found"  # the find-limit controller ended the run: its search is over
STOP_PRECISION = "precision_reached"  # --until: the watched figure was known well enough


@dataclass
class RunOptions:
    """Overrides and switches for one run (the CLI passes exactly the first eight)."""

    target: str | None = None
    profile: str | None = None
    out_dir: Path = Path("runs")
    processes: int = 1
    duration: str | None = None
    seed: int | None = None
    web: bool = False
    dry_run: bool = False
    locust_args: list[str] = field(default_factory=list)  # extra Locust flags (advanced)
    allow_paths: list[Path] = field(default_factory=list)  # traces may also come from these folders
    live: bool | None = None  # None: a live view when the console is a terminal
    expect_workers: int = 0  # > 0: a Locust master that waits for this many `rushhour worker`s
    master_bind: str = "127.0.0.1"  # where that master listens for its workers
    master_port: int = 5557
    workers_wait_s: float = 60.0  # how long it waits for them before giving up (one-line error)
    # early abort: None keeps the scenario's `abort:`; else the modes to watch ([] = none), from --abort
    abort: list[str] | None = None
    # builds the watcher for a scenario with an `abort:` (rushhour passes audit.early.Watcher: the parent
    # side of loadgen may not import the audit); a scenario asking for an abort without one is refused
    watcher: Callable[[Scenario], Watch] | None = None
    # lines a dry run adds for the scenario as it would run (rushhour passes rushhour.fits.dry_run_notes: the
    # testbed it would start, and the trace rows or conversations that exceed its context)
    dry_run_notes: Callable[[Scenario], list[str]] | None = None
    keep_going: bool = False  # --keep-going: no fail-fast stop when every attempt fails alike (loadgen/doomed.py)
    # --metrics-port: serve the run's live figures on /metrics while the load runs (0: any free port), built by
    # ``live_metrics`` (rushhour passes audit.live.LiveMetrics: they are classified as the audit classifies)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    live_metrics: Callable[[Scenario], LiveExporter] | None = None
    # --otlp: each attempt as a span and the per-tier figures over OTLP, built by ``otlp`` (rushhour passes
    # audit.otlp.OtlpExport with the endpoint bound) and fed by the shard tail in this process, never the load's
    otlp: Callable[[Scenario], OtlpSink] | None = None
    # --find-limit: builds the controller for a scenario with a `find_limit:` (rushhour passes
    # audit.limit.LimitController); it sets the load of the running processes through loadgen/livescale.py
    limit: Callable[[Scenario], Limit] | None = None
    find_limit: bool = False  # --find-limit: the scenario's `find_limit:`, else the defaults
    find_limit_persona: str | None = None  # --find-limit-persona: ramp this persona only
    # --until: builds the precision watcher (rushhour passes audit.until.UntilWatcher): it ends the run once its
    # figure is known well enough (``look`` returns run.json's ``until``), else the run's duration is the cap
    until: Callable[[Scenario], Watch] | None = None
    # called once the idle calibration probes are done, before the load processes start: the CLI begins its
    # heavy imports (the audit) there, in the start-up the anchor's lead absorbs, never beside the probes
    after_calibration: Callable[[], object] | None = None


def apply_overrides(scenario: Scenario, options: RunOptions) -> Scenario:
    """The scenario with the command line's target, profile, seed and duration applied (pure)."""
    update: dict[str, Any] = {}
    target = scenario.target
    if options.target or options.profile:
        if options.profile and options.profile not in PROFILES:
            raise ScenarioError(
                "--profile",
                [
                    Problem(
                        "target.profile", None, f"unknown profile {options.profile!r}",
                        did_you_mean(options.profile, PROFILES) or f"known: {', '.join(PROFILES)}"
                    )
                ],
            )
        tupdate: dict[str, Any] = {}
        if options.target:
            tupdate["url"] = options.target.rstrip("/")
        if options.profile:
            tupdate["profile"] = options.profile
        target = target.model_copy(update=tupdate)
        try:
            target = type(target).model_validate(target.model_dump())
        except ValidationError as exc:  # each error's own words: never the rejected value (it may hold a key)
            problems = [Problem("target." + ".".join(map(str, err["loc"])), None,
                                str(err["msg"]).removeprefix("Value error, ")) for err in exc.errors()]
            raise ScenarioError("--target", problems) from None
        update["target"] = target
    if options.seed is not None:
        update["seed"] = options.seed
    if options.abort is not None:
        unknown = sorted(set(options.abort) - set(ABORT_MODES))
        if unknown:
            raise ScenarioError("--abort", [Problem("abort", None, f"unknown mode(s) {', '.join(unknown)}",
                                                    f"known: {', '.join(ABORT_MODES)}")])
        from rushhour.scenarios.model import Abort

        base = scenario.abort or Abort()
        update["abort"] = base.model_copy(update={"hopeless_slo": "hopeless" in options.abort,
                                                  "saturation": "saturation" in options.abort})
    if options.find_limit and (scenario.find_limit is None or options.find_limit_persona):
        from rushhour.scenarios.model import FindLimit

        names = [p.name for p in scenario.personas]
        persona = options.find_limit_persona
        if persona is not None and persona not in names:
            raise ScenarioError("--find-limit-persona", [Problem("find_limit.persona", None,
                                                                 f"unknown persona {persona!r}",
                                                                 did_you_mean(persona, names) or
                                                                 f"personas: {', '.join(names)}")])
        limit = scenario.find_limit or FindLimit()  # --find-limit on a scenario without the block: the defaults
        update["find_limit"] = limit.model_copy(update={"persona": persona or limit.persona})
    if options.duration:
        try:
            total = parse_duration(options.duration)
            update["phases"] = scale_phases(scenario.phases, total)
        except ValueError as exc:
            raise ScenarioError("--duration", [Problem("phases", None, str(exc))]) from None
    return scenario.model_copy(update=update) if update else scenario


def check_mapping(scenario: Scenario, where: str) -> None:
    """Map every (tier, tenant) on every route now: a bad profile or credential fails before any send."""
    routes: list[tuple[str, str, str | None]] = [(scenario.target.profile, scenario.target.dialect, None)]
    routes += [(r.profile, r.dialect or scenario.target.dialect, r.credential) for r in scenario.resilience.fallback]
    problems = []
    for profile, dialect, cred in routes:
        for tier in scenario.tiers:
            try:
                map_tier(tier, tier.tenant_ids[0], profile, dialect, credential_override=cred)
            except TierError as exc:
                problems.append(Problem(f"tiers.{tier.name}", None, str(exc)))
    metrics = scenario.target.metrics
    if metrics is not None and metrics.credential is not None:
        from rushhour.loadgen.scrape import read_credential

        try:
            read_credential(metrics.credential)
        except ValueError as exc:
            problems.append(Problem("target.metrics.credential", None, str(exc)))
    if problems:
        raise ScenarioError(where, located(where, problems))


def check_tokenizer(scenario: Scenario, scenario_dir: Path, where: str) -> Scenario:
    """Load the scenario's tokenizer once here (a relative path is the scenario folder's, else the working one's)."""
    path = scenario.target.tokenizer
    if not path:
        return scenario
    from rushhour.loadgen.tokens import TokenizerError, load

    given = Path(path).expanduser()
    if not given.is_absolute() and (scenario_dir / given).exists():
        given = scenario_dir / given
    try:
        tokenizer = load(given)
    except TokenizerError as exc:
        raise ScenarioError(where, located(where, [Problem("target.tokenizer", None, str(exc))])) from None
    if tokenizer.chat_template is not None:  # rendered once now, in a child with caps: a bomb fails here, not mid-run
        from rushhour.loadgen.template_trial import trial_render

        problem = trial_render(Path(tokenizer.path).parent, str(tokenizer.template_file))
        if problem:
            raise ScenarioError(where, located(where, [Problem("target.tokenizer", None, problem)]))
    from rushhour.loadgen.datasets import DatasetError, check_tokens

    for i, persona in enumerate(scenario.personas):  # dataset rows held to a prompt's tokens, counted exactly now
        spec = getattr(persona, "dataset", None)
        if spec is not None:
            try:
                check_tokens(spec.path, spec.format, spec.limit, tokenizer.count)
            except DatasetError as exc:
                problems = [Problem(f"personas.{i}.dataset.path", None, str(exc))]
                raise ScenarioError(where, located(where, problems)) from None
    target = scenario.target.model_copy(update={"tokenizer": str(given.resolve())})
    return scenario.model_copy(update={"target": target})


def check_routes(scenario: Scenario, where: str) -> None:
    """Build every route's endpoint now: a URL the load processes could not connect to fails here, once."""
    from rushhour.loadgen.endpoint import Endpoint

    urls = [("target.url", scenario.target.url)]
    urls += [(f"resilience.fallback.{r.name}.url", r.url) for r in scenario.resilience.fallback]
    problems = []
    for field_name, url in urls:
        if url == "testbed":
            continue
        try:
            Endpoint.parse(url)
        except ValueError as exc:
            problems.append(Problem(field_name, None, f"cannot build a route to {url!r}: {exc}"))
    if problems:
        raise ScenarioError(where, located(where, problems))


FD_OVERHEAD = 32  # a load process's own files: shard, log, Python, Locust, gevent's hub


def peak_connections(scenario: Scenario, processes: int) -> int:
    """Sockets one load process may hold at once: each persona's peak (its own ``peak_sockets``) over the processes."""
    scale = max((p.agents_scale if p.agents_scale is not None else p.rate_scale for p in scenario.phases),
                default=1.0)
    total = sum(persona.peak_sockets(scale) for persona in scenario.personas)
    return int(total / max(1, processes)) + FD_OVERHEAD


def check_machine(scenario: Scenario, processes: int, where: str) -> None:
    """Open-file limit against the connections the scenario may hold: raise the soft limit if it is too
    low (the load processes inherit it), refuse in one line if even the hard limit is."""
    import resource

    need = peak_connections(scenario, processes)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if need <= soft:
        return
    if hard == resource.RLIM_INFINITY or need <= hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else hard, hard))
            return
    more = -(-need * processes // max(1, hard - FD_OVERHEAD))
    raise ScenarioError(where, [Problem(
        "personas", None,
        f"up to {need:,} connections per load process, but this machine allows {hard:,} open files "
        f"(ulimit -n)", f"use --processes {more} or fewer agents/sessions/max_in_flight")])




def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def closed_personas(scenario: Scenario) -> list[str]:
    """The ramped personas the live load scale does not reach (no open-loop arrival rate): a find-limit refuses."""
    persona = scenario.find_limit.persona if scenario.find_limit else None
    return [p.name for p in scenario.personas if (persona is None or p.name == persona) and not p.has_arrival_rate()]


def check_find_limit(scenario: Scenario, options: RunOptions, where: str) -> None:
    """``ScenarioError`` unless this run can find a limit: a controller, local processes only (remote workers
    do not read the run folder's load scale) and personas the live scale reaches (open-loop arrivals)."""
    if options.limit is None:
        raise ScenarioError(where, [Problem("find_limit", None, "this caller cannot run the find-limit controller",
                                            "run it with `rushhour run --find-limit`")])
    if options.expect_workers:
        raise ScenarioError("--find-limit", [Problem("find_limit", None, "remote workers cannot follow the "
                                                     "controller's load (it is set in the run folder)",
                                                     "run it with local --processes")])
    closed = closed_personas(scenario)
    if closed:
        raise ScenarioError(where, [Problem("find_limit", None, f"persona(s) {', '.join(closed)} have no open-loop "
                                            "arrival rate the controller can scale (chat, or agent_swarm with "
                                            "start: arrivals)", "name one persona with find_limit.persona")])


def prepare(name_or_path: str | Path, options: RunOptions) -> Scenario:
    """The scenario as it will run: loaded, the command line applied, every check passed (``ScenarioError`` or
    ``FileNotFoundError`` in one line each, before anything starts)."""
    scenario = apply_overrides(load_scenario(name_or_path), options)
    check_mapping(scenario, str(name_or_path))
    check_routes(scenario, str(name_or_path))
    check_machine(scenario, options.processes, str(name_or_path))
    scenario_dir = resolve_scenario_path(name_or_path).resolve().parent
    scenario = localise_traces(scenario, scenario_dir, options.allow_paths, str(name_or_path))
    scenario = check_tokenizer(scenario, scenario_dir, str(name_or_path))
    if options.processes < 1:
        raise ScenarioError("--processes", [Problem("processes", None, "must be >= 1")])
    if scenario.abort is not None and scenario.abort.enabled and options.watcher is None:
        # fail closed: an abort asked for and silently not watched would let a hopeless run go on unseen
        raise ScenarioError(str(name_or_path), [Problem("abort", None, "this caller cannot watch for an early "
                                                        "abort", "run it with `rushhour run`")])
    if scenario.find_limit is not None:
        check_find_limit(scenario, options, str(name_or_path))
    if options.expect_workers and not _loopback(options.master_bind) and (
            scenario.target.is_testbed or any(r.url == "testbed" for r in scenario.resilience.fallback)):
        raise ScenarioError("--expect-workers", [Problem("target.url", None, (
            "the embedded testbed listens on this machine's loopback, out of remote workers' reach: target a "
            "stack they can reach (a testbed of its own: python -m rushhour.testbed --host ADDR)"))])
    if options.expect_workers:  # remote workers prove the run's secret, which they get out of band (env)
        try:
            runkey.secret_from()
        except ValueError as exc:
            raise ScenarioError("--expect-workers", [Problem(runkey.SECRET_ENV, None, str(exc))]) from None
    return scenario
