"""The one command line: composes each stage's verbs; no logic of its own (imports stay lazy)."""

from __future__ import annotations

import functools
import sys
import traceback
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from rushhour import flags
from rushhour.consoles import make_console, print_error, widen_help

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
DEBUG_FLAG = "--debug"
DEBUG_HINT = f"run again with {DEBUG_FLAG} for the traceback"


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type, and its first non-empty line of text, cut."""
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= 300 else line[:299] + "…"


def _take_debug_flag(argv: list[str]) -> bool:
    """Remove every ``--debug`` from ``argv`` (it may stand anywhere on the line); True when there was one."""
    found = DEBUG_FLAG in argv[1:]
    if found:
        argv[1:] = [arg for arg in argv[1:] if arg != DEBUG_FLAG]
    return found


class _App(typer.Typer):
    """The command line with one top-level handler: an unexpected error is one line plus a hint.

    ``--debug`` (anywhere on the line) lets the traceback through instead. Expected errors
    (bad scenarios, missing runs) are handled by each verb with their own one-line message.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        debug = _take_debug_flag(sys.argv)
        from rushhour.sim.compiled import reexec_compiled

        reexec_compiled(sys.argv[1:], debug)  # the simulator's verbs: again, compiled, when a build matches
        from rushhour.pipes import guard_stdout

        guard_stdout()  # `rushhour compare … | head -1`: a reader that leaves early is not a failure
        widen_help()
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:  # the last line of defence: the user sees one line, never a traceback
            if debug:
                traceback.print_exc()
                sys.exit(EXIT_INTERNAL)
            sys.stderr.write(f"error: {one_line(exc)}\n{DEBUG_HINT}\n")
            sys.exit(EXIT_INTERNAL)


app = _App(
    name="rushhour",
    help="Load-test tiered LLM serving stacks and audit, per tier, who waited and who was dropped.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
scenario_app = typer.Typer(help="Validate scenarios, print their JSON Schema, list or show the built-in ones.",
                           no_args_is_help=True)
app.add_typer(scenario_app, name="scenario")


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option(DEBUG_FLAG, help="show the traceback of an unexpected error")] = False,
) -> None:
    """Options for every verb (``--debug`` is taken off the line before parsing: it may stand anywhere)."""


def _register_capacity() -> None:
    """Capacity planning verbs: ladders of load, the multi-tier study, run-vs-run comparison."""
    from rushhour import capacity

    app.command("sweep")(capacity.sweep)
    app.command("study")(capacity.study)
    app.command("compare")(capacity.compare)
    from rushhour import simulated

    app.command("simulate")(simulated.simulate)
    app.command("plan")(simulated.plan)
    from rushhour import calibrate

    app.command("calibrate")(calibrate.command)


_register_capacity()


def _register_shipped() -> None:
    """What the docs point to, by command (a pip user has no checkout): scenario show, example, schema summary."""
    from rushhour import shipped

    scenario_app.command("show")(shipped.scenario_show)
    app.command("example")(shipped.example)
    app.add_typer(shipped.schema_app, name="schema")


_register_shipped()

console = make_console(stderr=True)
out = make_console()


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    print_error(console, message)
    return typer.Exit(code)


AllowPaths = Annotated[
    list[Path] | None,
    typer.Option("--allow-path", help="also read traces from this folder (repeatable); by default only the "
                 "scenario's folder and the shipped traces"),
]


@scenario_app.command("check")
def scenario_check(
    files: Annotated[list[str], typer.Argument(help="scenario files or built-in names")],
    allow_path: AllowPaths = None,
) -> None:
    """Validate scenario files; errors name the file, the line and the field."""
    from rushhour.fits import context_warnings
    from rushhour.loadgen.prepare import check_tokenizer
    from rushhour.loadgen.traces import localise_traces
    from rushhour.scenarios import ScenarioError, load_scenario, resolve_scenario_path

    bad = 0
    for name in files:
        try:
            scenario = load_scenario(name)
            folder = resolve_scenario_path(name).resolve().parent
            scenario = localise_traces(scenario, folder, allow_path or [], name)
            scenario = check_tokenizer(scenario, folder, name)  # and its chat template's trial render
        except ScenarioError as exc:
            bad += 1
            console.print(str(exc), highlight=False, markup=False, soft_wrap=True)
            continue
        except FileNotFoundError as exc:
            bad += 1
            console.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
            continue
        problem = _testbed_problem(scenario)
        if problem:
            bad += 1
            console.print(f"invalid scenario {name}: {problem}", highlight=False, markup=False, soft_wrap=True)
            continue
        out.print(
            f"ok  {name}: {scenario.name} — {len(scenario.tiers)} tiers, {len(scenario.personas)} personas, "
            f"{scenario.duration_s:.0f} s against {scenario.target.url} ({scenario.target.profile})",
            highlight=False,
        )
        for warning in context_warnings(scenario):  # it runs, but these requests will be refused
            console.print(f"warning: {name}: {warning}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(EXIT_USAGE if bad else EXIT_OK)


def _testbed_problem(scenario: object) -> str | None:
    """The embedded testbed's own config check, so `scenario check` catches its typos before a run."""
    from rushhour.loadgen.testbed_proc import testbed_config
    from rushhour.scenarios.model import Route, Scenario
    from rushhour.testbed.config import ConfigError, TestbedConfig, from_dict

    assert isinstance(scenario, Scenario)
    routes: list[tuple[str, Route | None]] = [("target.testbed", None)] if scenario.target.is_testbed else []
    fallbacks = [r for r in scenario.resilience.fallback if r.url == "testbed"]
    routes += [(f"resilience.fallback[{r.name}].testbed", r) for r in fallbacks]
    for where, route in routes:
        try:
            from_dict(TestbedConfig, testbed_config(scenario, route))
        except (ConfigError, ValueError) as exc:
            return f"{where}: {exc}"
    return None


@scenario_app.command("schema")
def scenario_schema() -> None:
    """Print the scenario JSON Schema (for editor completion)."""
    from rushhour.scenarios import json_schema

    sys.stdout.write(json_schema() + "\n")


@scenario_app.command("list")
def scenario_list() -> None:
    """List the built-in scenario library."""
    from rushhour.scenarios.loader import LIBRARY_DIR, load_scenario

    for path in sorted(LIBRARY_DIR.glob("*.yaml")):
        scenario = load_scenario(path)
        out.print(f"[bold]{path.stem:<20}[/] {scenario.description}", highlight=False)


@app.command()
def run(
    scenario: Annotated[str, typer.Argument(help="scenario file or built-in name (see `rushhour scenario list`)")],
    target: Annotated[str | None, typer.Option(help="override target URL ('testbed' for the embedded one)")] = None,
    profile: Annotated[str | None, typer.Option(help="override the stack profile")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="folder for runs")] = Path("runs"),
    processes: Annotated[int, typer.Option(help="Locust processes on this machine", callback=flags.processes)] = 1,
    duration: Annotated[str | None, typer.Option(help="shorten/stretch phases to this total, e.g. 60s")] = None,
    seed: Annotated[int | None, typer.Option(help="override the scenario seed", callback=flags.seed)] = None,
    web: Annotated[bool, typer.Option(help="keep Locust's web UI instead of running headless")] = False,
    dry_run: Annotated[bool, typer.Option(help="print expected requests and tokens per tier; send nothing")] = False,
    report: Annotated[bool, typer.Option(help="audit and render reports at the end")] = True,
    allow_path: AllowPaths = None,
    expect_workers: Annotated[int, typer.Option(
        help="wait for N `rushhour worker`s on other machines; they run the load and ship their records here",
        callback=flags.expect_workers)] = 0,
    master_bind: Annotated[str, typer.Option(help="address the master listens on for its workers")] = "127.0.0.1",
    master_port: Annotated[int, typer.Option(help="port the master listens on for its workers",
                                            callback=flags.port)] = 5557,
    workers_wait: Annotated[float, typer.Option(help="seconds to wait for the workers before giving up",
                                               callback=flags.workers_wait)] = 60.0,
    abort: Annotated[str | None, typer.Option(
        help="stop early and fail the gate: 'hopeless' (an SLO can no longer pass), 'saturation' (the queue only "
             "grows or refusals climb), both comma-separated, or 'none'; default: the scenario's `abort:`")] = None,
    repeat: Annotated[int, typer.Option(
        min=1, max=1000, help="run N times with seeds derived from the scenario's (the first is its own), "
        "audit each, aggregate per tier with 95 % t-intervals across runs (repeat.json, repeat.md, repeat.html)")] = 1,
    repeat_gate: Annotated[str, typer.Option(
        help="with --repeat: exit non-zero when 'any' run fails, when the 'aggregate' fails, or 'both'")] = "any",
    gate_run: Annotated[bool, typer.Option(
        "--gate", help="exit as `rushhour gate` would on the run: 0 every tier passes, 1 one fails, 2 invalid, "
        "inconclusive or no SLO (without it a completed run exits 0 whatever the verdict; --repeat always "
        "gates)")] = False,
    junit: Annotated[Path | None, typer.Option(help="with --gate: write the gate's JUnit XML here")] = None,
    markdown: Annotated[Path | None, typer.Option(
        help="with --gate: append the gate's Markdown summary here ($GITHUB_STEP_SUMMARY)")] = None,
    keep_going: Annotated[bool, typer.Option(
        help="do not stop a run whose calibration or first attempts all fail alike (wrong model, key or "
             "address; without it such a run stops within seconds and exits 2)")] = False,
    metrics_port: Annotated[int | None, typer.Option(
        min=0, max=65535, help="serve the run's live figures as Prometheus /metrics on this port while the load "
        "runs: per tier attempts by the audit's class, not sent, a TTFT histogram; per load process in flight and "
        "loop lag (0: any free port, printed)")] = None,
    metrics_host: Annotated[str, typer.Option(help="address --metrics-port listens on")] = "127.0.0.1",
    otlp: Annotated[bool, typer.Option(
        "--otlp", help="export one span per attempt (the trace and span ids of its traceparent) and per-tier metrics "
        "over OTLP/HTTP to the endpoint of the standard OTEL_EXPORTER_OTLP_* variables (the otel extra)")] = False,
    otlp_endpoint: Annotated[str | None, typer.Option(
        help="with or without --otlp: export over OTLP/HTTP to this base URL (e.g. http://127.0.0.1:4318; "
             "/v1/traces and /v1/metrics are added)")] = None,
    find_limit: Annotated[bool, typer.Option(
        help="find each tier's limit in this one run: ramp the load, bisect between the last passing and first "
             "failing step, hold at the limit (the scenario's `find_limit:`, else its defaults; the run's "
             "duration is the cap)")] = False,
    find_limit_persona: Annotated[str | None, typer.Option(
        help="with --find-limit: ramp this persona's load only (the others stay as the scenario has them)")] = None,
    find_limit_from: Annotated[str | None, typer.Option(
        help="with --find-limit: start the search from a prior bracket, LOW..HIGH or LOW (× the rates), or a "
             "find-limit run folder's answer (e.g. `rushhour simulate --find-limit`'s): its low first, then its "
             "high, then steps away from it until the limit is bracketed")] = None,
    until: Annotated[str | None, typer.Option(
        help="end the run once a figure is known this well, e.g. 'interactive ttft_ms.p99 ±5%' (its 95 % interval's "
             "half-width within 5 % of it); the run's duration is the cap")] = None,
) -> None:
    """Run a scenario: start the testbed if targeted, drive Locust, record, audit and report."""
    from rushhour.fits import dry_run_notes
    from rushhour.loadgen.prepare import RunOptions
    from rushhour.loadgen.runner import run_scenario
    from rushhour.scenarios import ScenarioError
    from rushhour.warm import later, warm

    if expect_workers < 0 or (expect_workers and processes != 1):
        raise _fail("--expect-workers takes a number >= 1 and replaces --processes (each worker is one process)")
    if (junit or markdown) and not gate_run:
        raise _fail("--junit and --markdown are the gate's files: give --gate with them")
    if expect_workers and not dry_run:
        from rushhour.ports import listen_problem

        busy = listen_problem(master_bind, master_port, "--master-port")
        if busy:
            raise _fail(busy)
    if gate_run and dry_run:
        raise _fail("--gate judges a run, and a dry run sends nothing: leave one of them out")
    if metrics_port and not dry_run:
        from rushhour.ports import listen_problem

        busy = listen_problem(metrics_host, metrics_port, "--metrics-port")
        if busy:
            raise _fail(busy)
    otlp_sink = _otlp_sink(otlp_endpoint) if (otlp or otlp_endpoint is not None) and not dry_run else None
    until_factory = _until(until, scenario) if until else None
    limit_factory = later("rushhour.audit.limit", "LimitController")
    if find_limit_from is not None:
        from rushhour.limit_prior import PriorError, read_prior

        try:
            limit_factory = functools.partial(limit_factory, prior=read_prior(find_limit_from))
        except PriorError as exc:
            raise _fail(str(exc)) from None
    find_limit = find_limit or bool(find_limit_persona) or find_limit_from is not None
    options = RunOptions(
        target=target, profile=profile, out_dir=out_dir, processes=processes, duration=duration,
        seed=seed, web=web, dry_run=dry_run, allow_paths=list(allow_path or []),
        expect_workers=expect_workers, master_bind=master_bind, master_port=master_port, workers_wait_s=workers_wait,
        abort=_abort_modes(abort), watcher=later("rushhour.audit.early", "Watcher"), dry_run_notes=dry_run_notes,
        keep_going=keep_going, metrics_port=metrics_port, metrics_host=metrics_host,
        live_metrics=later("rushhour.audit.live", "LiveMetrics"), otlp=otlp_sink, until=until_factory,
        limit=limit_factory, find_limit=find_limit,
        find_limit_persona=find_limit_persona,
    )
    # the audit (pandas, pyarrow) loads in the background once the idle probes are done (a second or two of CPU
    # beside them would lengthen the baseline they measure), while Locust starts, and only when this run will
    # surely use it; a --no-report run without a watcher never loads it
    needed = [*(["rushhour.audit.early"] if report or gate_run or abort else []),
              *(["rushhour.audit.limit"] if options.find_limit else []),
              *(["rushhour.audit.live"] if metrics_port is not None else []), *(["rushhour.reports"] if report else [])]
    if needed and not dry_run:
        options.after_calibration = lambda: warm(*needed)
    if repeat_gate not in ("any", "aggregate", "both"):  # a dry run is where a typo should show
        raise _fail(f"--repeat-gate takes any, aggregate or both, not {repeat_gate!r}")
    if repeat > 1 and not dry_run:
        from rushhour.repeat import run_repeated

        try:
            _, repeated, code = run_repeated(scenario, options, repeat, repeat_gate, console, out,  # type: ignore[arg-type]
                                             report=report)
        except (ScenarioError, FileNotFoundError) as exc:
            raise _fail(str(exc)) from None
        if repeated is not None and (junit or markdown):
            from rushhour.reports.repeat import render_junit as repeat_junit
            from rushhour.reports.repeat import render_markdown as repeat_markdown

            _write_gate_files(repeated, junit, markdown, repeat_junit, repeat_markdown)
        raise typer.Exit(code)
    try:
        result = run_scenario(scenario, options, console=console)
    except (ScenarioError, FileNotFoundError) as exc:
        raise _fail(str(exc)) from None
    if dry_run or result.run_dir is None:
        raise typer.Exit(result.exit_code)
    out.print(f"run folder: {result.run_dir}", highlight=False)
    if result.stop_reason in ("startup_error", "disk_full"):
        # nothing ran, or the disk is full (an audit could not write summary.json): `rushhour audit` later
        raise typer.Exit(result.exit_code or EXIT_USAGE)
    if report or gate_run:
        code = _audit_and_report(result.run_dir, render=report, gate_run=gate_run, junit=junit, markdown=markdown)
        raise typer.Exit(code if result.exit_code == 0 else result.exit_code)
    raise typer.Exit(result.exit_code)


def _otlp_sink(endpoint: str | None) -> Callable[[Any], Any]:
    """The OTLP export for ``--otlp``/``--otlp-endpoint``: the SDK is imported here only; its absence is one line."""
    if endpoint is not None:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _fail("--otlp-endpoint takes an http(s) URL such as http://127.0.0.1:4318")
    try:
        from rushhour.audit.otlp import OtlpExport
    except ImportError as exc:
        if not str(exc.name or "").startswith(("opentelemetry", "google")):
            raise
        raise _fail("--otlp needs the OpenTelemetry SDK and exporter: pip install 'rushhour[otel]'") from None
    return functools.partial(OtlpExport, endpoint=endpoint)


def _until(spec: str, scenario: str) -> Callable[[Any], Any]:
    """The ``--until`` watcher's factory, its text and tier checked now (one line and exit 2 when wrong)."""
    from rushhour.audit.until import UntilWatcher, parse_until
    from rushhour.scenarios import ScenarioError, load_scenario

    try:
        tiers = [t.name for t in load_scenario(scenario).tiers]
    except (ScenarioError, FileNotFoundError):
        tiers = None  # the run says what is wrong with the scenario itself
    try:
        wanted = parse_until(spec, tiers)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    return lambda sc: UntilWatcher(sc, wanted)


def _write_gate_files(verdict: Any, junit: Path | None, markdown: Path | None, to_junit: Callable[[Any], str],
                      to_markdown: Callable[[Any], str]) -> None:
    """The gate's JUnit XML (written) and Markdown (appended: a CI job's step summary collects every step's)."""
    if junit:
        junit.write_text(to_junit(verdict))
    if markdown:
        with markdown.open("a") as handle:
            handle.write(to_markdown(verdict))


def _abort_modes(value: str | None) -> list[str] | None:
    """``--abort hopeless,saturation`` as a list ([] for 'none'; None: keep the scenario's)."""
    if value is None:
        return None
    modes = [part.strip() for part in value.split(",") if part.strip()]
    return [] if modes == ["none"] else modes


@app.command()
def worker(
    master: Annotated[str, typer.Option(help="the master's HOST[:PORT] (`rushhour run … --expect-workers N`)")],
    spool: Annotated[Path | None, typer.Option(
        help="local copy of this worker's shard (default ~/.cache/rushhour/spool)")] = None,
    target: Annotated[list[str] | None, typer.Option(
        help="a URL this worker may send requests (and the scenario's credentials) to; repeat for fallback "
             "routes (or RUSHHOUR_WORKER_TARGETS=URL,URL); anything else the master asks for is refused")] = None,
) -> None:
    """Join a multi-host run: get the scenario from the master, drive this worker's share, ship the records back."""
    import os

    from rushhour.loadgen.distributed import parse_master, resolve_master, worker_command, worker_env

    try:
        cmd = worker_command(master)
        env = worker_env(dict(os.environ), target or [], spool)
        resolve_master(parse_master(master)[0])
    except ValueError as exc:
        raise _fail(str(exc)) from None
    # become the Locust worker (same PID: a supervisor or a test stops it by this PID)
    os.execve(cmd[0], cmd, env)


@app.command()
def k8s(
    scenario: Annotated[str, typer.Argument(
        help="scenario file or built-in name (it goes into a ConfigMap as is)")],
    workers: Annotated[int, typer.Option(help="worker pods (one Locust process each)")],
    image: Annotated[str, typer.Option(help="an image with rushhour installed: `rushhour example dockerfile` "
                                       "prints its Dockerfile (docs/distributed.md, 'The image')")] = "rushhour:0.1.0",
    name: Annotated[str, typer.Option(help="prefix of every object's name")] = "rushhour",
    namespace: Annotated[str | None, typer.Option(help="Kubernetes namespace")] = None,
    target: Annotated[str | None, typer.Option(help="override target URL")] = None,
    profile: Annotated[str | None, typer.Option(help="override the stack profile")] = None,
    duration: Annotated[str | None, typer.Option(help="shorten/stretch phases to this total")] = None,
    secret: Annotated[str | None, typer.Option(help="Secret whose keys become environment variables")] = None,
) -> None:
    """Print the Kubernetes manifests of a multi-host run: master Job + Service, workers, Secret, NetworkPolicy."""
    from rushhour.k8s import K8sOptions, render
    from rushhour.loadgen.prepare import RunOptions, apply_overrides
    from rushhour.scenarios import ScenarioError, load_scenario, resolve_scenario_path

    try:
        # refuse a broken scenario or option here, not in the cluster: --target, --profile, --duration as `run` does
        loaded = apply_overrides(load_scenario(scenario), RunOptions(target=target, profile=profile, duration=duration))
        if loaded.target.url == "testbed" or any(r.url == "testbed" for r in loaded.resilience.fallback):
            raise ValueError("the embedded testbed listens on the master's loopback, out of the workers' reach: "
                             "give --target the URL of the stack under test")
        text = resolve_scenario_path(scenario).read_text()  # a built-in name too, as every other verb takes
        urls = [loaded.target.url, *(r.url for r in loaded.resilience.fallback if r.url)]
        out.print(render(text, K8sOptions(workers=workers, image=image, name=name, namespace=namespace,
                                          target=target, profile=profile, duration=duration, secret=secret,
                                          worker_targets=urls)),
                  end="", markup=False, highlight=False, soft_wrap=True)
    except (ScenarioError, FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from None


def _audit_and_report(run_dir: Path, *, render: bool = True, gate_run: bool = False, junit: Path | None = None,
                      markdown: Path | None = None) -> int:
    """Audit the run, render its reports (``render``); the exit code: 0, or the gate's with ``gate_run``."""
    from rushhour.audit import AuditError, report_table, run_audit
    from rushhour.reports import print_terminal, print_verdicts, render_junit, render_markdown, write_reports

    try:
        summary = run_audit(run_dir)
        table = report_table(run_dir) if render else None
    except AuditError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    if render:
        paths = write_reports(summary, run_dir, table)
        print_terminal(summary, out)
        out.print(f"HTML report: {paths['html'].resolve()}", highlight=False)
    elif gate_run:
        print_verdicts(summary, out)
    if not gate_run:
        return EXIT_OK
    _write_gate_files(summary, junit, markdown, render_junit, render_markdown)
    return summary.exit_code


@app.command()
def serve(
    profile: Annotated[str, typer.Option(help="stack behaviour to imitate")] = "llm-d",
    config: Annotated[Path | None, typer.Option(help="testbed YAML config")] = None,
    host: Annotated[str, typer.Option(help="loopback address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0 = ephemeral)")] = 8000,
    ledger: Annotated[Path | None, typer.Option(help="write the ground-truth ledger here (JSONL)")] = None,
    preset: Annotated[str | None, typer.Option(help="GPU/model preset; default h100-llama8b (256 sequences, a "
                                               "430,000-token context), where a scenario's `url: testbed` starts "
                                               "`tiny` (4 sequences, a 4,096-token context)")] = None,
    replicas: Annotated[int | None, typer.Option(
        help="simulated replicas; default 2 (a scenario's testbed: 1)", callback=flags.testbed_replicas)] = None,
    speed: Annotated[float | None, typer.Option(help="time scale of the simulated GPUs", callback=flags.speed)] = None,
) -> None:
    """Serve the embedded testbed: a simulated tiered GPU stack with a ground-truth ledger.

    Alone it imitates 2 × H100 serving Llama-3.1-8B (models `testbed` and meta-llama/Llama-3.1-8B-Instruct); a
    scenario's `url: testbed` starts its own, as its target.testbed says (default: one `tiny` replica).
    """
    from rushhour import testbed
    from rushhour.scenarios.names import did_you_mean
    from rushhour.testbed.config import PROFILES

    if profile not in PROFILES:
        near = did_you_mean(profile, PROFILES)
        raise _fail(f"unknown profile {profile!r}" + (f": {near}" if near else "") + f" (testbed profiles: "
                    f"{', '.join(PROFILES)})")
    argv = ["--profile", profile, "--host", host, "--port", str(port)]
    for flag, value in (("--config", config), ("--ledger", ledger), ("--preset", preset),
                        ("--replicas", replicas), ("--speed", speed)):
        if value is not None:
            argv += [flag, str(value)]
    raise typer.Exit(testbed.main(argv))


@app.command()
def audit(
    run_dir: Annotated[Path, typer.Argument(help="a run folder (runs/<id>)")],
    quiet: Annotated[bool, typer.Option(help="write summary.json only")] = False,
    force: Annotated[bool, typer.Option(help="audit again even when nothing changed")] = False,
) -> None:
    """Classify every attempt of a run; write summary.json and attempts.parquet (re-runnable on old runs).

    When neither the records, run.json, metrics.jsonl, the rules nor the audit's code changed since the
    last audit (its attempts table's fingerprint), the existing summary is kept: nothing to redo.
    """
    from rushhour.audit import AuditError, IntegrityError, current_summary, run_audit

    note = _disk_full_note(run_dir)
    if note:
        console.print(f"[yellow]warning:[/] {note}", highlight=False, soft_wrap=True)
    try:
        try:
            kept = None if force else current_summary(run_dir)
        except IntegrityError as exc:  # an edited or damaged table is never kept: derived again from the records
            console.print(f"warning: {exc}; auditing again", highlight=False, markup=False, soft_wrap=True)
            kept = None
        summary = kept or run_audit(run_dir)
    except AuditError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write the audit of {run_dir}: {exc.strerror or exc}") from None
    if not quiet:
        from rushhour.reports import print_terminal

        print_terminal(summary, out)
    if kept is not None:  # say why it took no time, on stderr: the path line stays as scripts read it
        console.print("kept: nothing changed since the last audit (--force audits again)", highlight=False)
    out.print(f"summary: {(run_dir / 'summary.json').resolve()}", highlight=False)


def _disk_full_note(run_dir: Path) -> str | None:
    """What a run stopped by a full disk is missing (run.json's ``disk_full``), in one line."""
    from rushhour.records.manifest import read_manifest

    try:
        manifest = read_manifest(run_dir)
    except (OSError, ValueError):
        return None
    info = manifest.disk_full
    if manifest.stop_reason != "disk_full" or info is None:
        return None
    at = info.get("at_s")
    when = f"at t = {at:.1f} s" if isinstance(at, int | float) and at >= 0 else f"during {info.get('during')}"
    shards = manifest.shards
    return (f"this run stopped {when} because the disk was full: missing {info.get('missing')}; "
            f"{len(shards)} shard(s) hold what was written before")


REPORT_FORMATS = ("all", "br0.2")  # all: report.html, report.md, junit.xml, drops.csv; br0.2: llm-d-benchmark's


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="a run folder (runs/<id>)")],
    open_browser: Annotated[bool, typer.Option("--open", help="open the HTML report")] = False,
    fmt: Annotated[str, typer.Option(
        "--format", help="all: report.html, report.md, junit.xml, drops.csv; br0.2: llm-d-benchmark's benchmark "
        "report v0.2 (benchmark_report_v0.2,_rushhour.yaml)")] = "all",
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="with --format br0.2: write the report to this file, or into this folder, instead of into the "
        "run folder")] = None,
    experiment_id: Annotated[str | None, typer.Option(
        help="with --format br0.2: llm-d-benchmark's experiment id ($LLMDBENCH_RUN_EXPERIMENT_ID), written as "
             "run.eid the way its converters write it")] = None,
) -> None:
    """Render the HTML, Markdown and JUnit reports of an audited run (audits it first if needed), or its BR0.2 file."""
    from rushhour.audit import AuditError, load_or_audit, report_table
    from rushhour.reports import write_br02, write_reports

    if fmt not in REPORT_FORMATS:
        raise _fail(f"--format {fmt!r}: one of {', '.join(REPORT_FORMATS)}")
    if (out_file is not None or experiment_id is not None) and fmt != "br0.2":
        raise _fail("--out and --experiment-id belong to one format: use them with --format br0.2")
    if open_browser and fmt != "all":
        raise _fail("--open opens the HTML report: --format all writes it")
    try:
        summary = load_or_audit(run_dir)
        table = report_table(run_dir)
        if fmt == "br0.2":
            paths = {"br0.2": write_br02(summary, run_dir, table, out_file, experiment_id)}
        else:
            paths = write_reports(summary, run_dir, table)
    except AuditError as exc:
        raise _fail(str(exc)) from None
    except (OSError, ValueError) as exc:  # an unwritable --out, a table without the columns BR0.2 reads
        raise _fail(f"report: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None
    for kind, path in paths.items():
        out.print(f"{kind:<9} {path.resolve()}", highlight=False)
    if open_browser:
        import webbrowser

        webbrowser.open(paths["html"].resolve().as_uri())


@app.command()
def gate(
    run_dir: Annotated[Path, typer.Argument(help="a run folder (runs/<id>)")],
    slo: Annotated[Path | None, typer.Option(help="SLO file overriding the scenario's")] = None,
    judge: Annotated[str | None, typer.Option(help="point | bound (confidence bound)")] = None,
    junit: Annotated[Path | None, typer.Option(help="write JUnit XML here")] = None,
    markdown: Annotated[
        Path | None, typer.Option(help="append a Markdown summary here ($GITHUB_STEP_SUMMARY)")
    ] = None,
) -> None:
    """Judge a run against its SLOs: exit 0 pass, 1 fail, 2 invalid, inconclusive or no SLO (or a `--repeat` folder)."""
    from rushhour.audit import AuditError, run_audit
    from rushhour.reports import print_verdicts, render_junit, render_markdown

    if (run_dir / "repeat.json").is_file() and not (run_dir / "run.json").exists():
        if slo is not None or judge is not None:  # repeat.json was judged with the scenario's SLOs: say so, not ignore
            raise _fail("--slo and --judge judge one run: gate each run folder of the repeat with them")
        raise typer.Exit(_gate_repeat(run_dir, markdown, junit))

    try:
        # other SLOs or another judge are this gate's question: the run's own summary.json stays as it was
        summary = run_audit(run_dir, slo_file=slo, judge=judge, write=slo is None and judge is None)
    except AuditError as exc:
        raise _fail(str(exc)) from None
    print_verdicts(summary, out)
    _write_gate_files(summary, junit, markdown, render_junit, render_markdown)
    raise typer.Exit(summary.exit_code)


@app.command()
def history(
    runs_dirs: Annotated[list[Path], typer.Argument(
        help="run folders, or folders holding them (runs/, a --repeat folder)")],
    out_dir: Annotated[Path, typer.Option(
        "--out", help="folder for history.parquet, history.html, history.json")] = Path("history"),
    window: Annotated[int, typer.Option(min=1, max=1000, help="the newest run is judged against this many valid "
                                        "runs of its scenario before it (3 or more: run-to-run spread)")] = 5,
    min_change: Annotated[str, typer.Option(
        help="practical minimum of a latency rise against the window (TTFT p50/p99, E2E p99)")] = "10%",
    min_latency_ms: Annotated[float | None, typer.Option(
        min=0, max=3_600_000, show_default=False, help="practical minimum of a latency rise in ms, beside "
        "--min-change: a smaller rise is a busy host's jitter; default 25")] = None,
    min_drop_change: Annotated[str, typer.Option(
        help="practical minimum of a not-served rise against the window, in points")] = "1pt",
    fail_on_regression: Annotated[bool, typer.Option(
        help="exit 1 when the newest run regressed against the window, 2 when it cannot be judged (no window, "
             "an invalid or cut-short newest run)")] = False,
) -> None:
    """A per-tier trend across audited runs (Parquet + HTML), and the newest run against a trailing window."""
    from rushhour.history import HISTORY_HTML, HISTORY_PARQUET, build_history, parse_percent
    from rushhour.reports.history import print_history
    from rushhour.studies.compare import MIN_LATENCY_MS, RegressionRule

    missing = [str(p) for p in runs_dirs if not p.exists()]
    if missing:
        raise _fail(f"no such folder: {', '.join(missing)}")
    try:
        floor = MIN_LATENCY_MS if min_latency_ms is None else min_latency_ms
        rule = RegressionRule(latency_rel=parse_percent(min_change, what="--min-change"), latency_abs_ms=floor,
                              drop_abs=parse_percent(min_drop_change, what="--min-drop-change"))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    from rushhour.audit import AuditError

    try:
        result, rows = build_history(runs_dirs, out_dir, window, rule)
    except AuditError as exc:  # an edited or damaged run's audit: refused, named
        raise _fail(str(exc)) from None
    if not result.runs:
        raise _fail("no audited run found in " + ", ".join(str(p) for p in runs_dirs))
    for line in result.skipped:
        console.print(f"skipped: {line}", highlight=False, markup=False, soft_wrap=True)
    print_history(result, rows, out)
    out.print(f"trend: {(out_dir / HISTORY_PARQUET).resolve()}", highlight=False)
    out.print(f"HTML:  {(out_dir / HISTORY_HTML).resolve()}", highlight=False)
    raise typer.Exit(result.exit_code if fail_on_regression else EXIT_OK)


@app.command()
def verify(
    run_dir: Annotated[Path, typer.Argument(help="a run folder (runs/<id>)")],
    key: Annotated[str | None, typer.Option(
        help="check integrity.sig against this Ed25519 key: env:NAME (a PEM public or private key)")] = None,
    sign: Annotated[str | None, typer.Option(
        help="sign the intact folder's integrity.json with this Ed25519 private key: env:NAME")] = None,
) -> None:
    """Is the run folder the one its audit sealed (integrity.json)? Exit 0 intact, 1 tampered (names files), 2 usage."""
    from rushhour.verify import verify as verify_folder

    outcome = verify_folder(run_dir, key, sign)
    if outcome.error:
        raise _fail(outcome.error, outcome.code)
    for line in outcome.lines:
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(outcome.code)


def _gate_repeat(folder: Path, markdown: Path | None, junit: Path | None) -> int:
    """The gate of a ``run --repeat`` folder: its runs' verdicts and the aggregate, as repeat.json decided."""
    from rushhour.repeat import read_repeat

    try:
        summary = read_repeat(folder)
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot read {folder / 'repeat.json'}: {one_line(exc)}") from None
    from rushhour.reports.repeat import print_repeat, render_junit, render_markdown

    print_repeat(summary, out)
    _write_gate_files(summary, junit, markdown, render_junit, render_markdown)
    return summary.exit_code


@app.command()
def doctor(
    scenario: Annotated[str | None, typer.Argument(help="scenario file or built-in name (probes its tiers)")] = None,
    target: Annotated[str | None, typer.Option(help="the stack's base URL, e.g. http://127.0.0.1:8000")] = None,
    profile: Annotated[str | None, typer.Option(help="the stack profile (vllm, litellm, llm-d, …)")] = None,
    model: Annotated[str | None, typer.Option(help="model name to request (default: the scenario's)")] = None,
    fillers: Annotated[int, typer.Option(help="long requests per polarity trial (0: skip it)",
                                         callback=flags.fillers)] = 8,
    metrics: Annotated[str | None, typer.Option(help="metrics URL (default: the target's /metrics)")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="folder for the probes' records")] = Path("runs"),
) -> None:
    """A handful of probes and one scrape: does rushhour understand this stack? Exit 1 if it would misread it."""
    from rushhour.audit.doctor import doctor_input, exit_code, judge
    from rushhour.loadgen.diagnose import DoctorError, diagnose, prepare
    from rushhour.reports.doctor import print_doctor

    try:
        plan = prepare(scenario, target=target, profile=profile, model=model, metrics=metrics)
    except DoctorError as exc:
        raise _fail(str(exc)) from None
    console.print(f"doctor: probing {plan.url} as profile {plan.profile} "
                  f"({len(plan.scenario.tiers)} tiers, {fillers} fillers) …", highlight=False)
    try:
        found = diagnose(plan, out_dir, fillers)
    except DoctorError as exc:
        raise _fail(str(exc)) from None
    checks = judge(doctor_input(plan, found))
    print_doctor(checks, out, target=plan.url, profile=plan.profile, folder=str(found.folder))
    raise typer.Exit(exit_code(checks))


def main() -> None:  # pragma: no cover - console entry point
    app(prog_name="rushhour")  # also when started again as `python -m rushhour.cli` (the compiled simulator)


if __name__ == "__main__":  # pragma: no cover
    main()
