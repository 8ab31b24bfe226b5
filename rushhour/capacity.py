"""Capacity commands: ``sweep``, ``study`` and ``compare`` (registered by ``rushhour.cli``; imports stay lazy)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rushhour import flags
from rushhour.consoles import make_console, print_error

if TYPE_CHECKING:
    from rushhour.studies.sweep import Plan, PlannedStep

console = make_console(stderr=True)
out = make_console()

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    print_error(console, message)
    return typer.Exit(code)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _label(step: PlannedStep) -> str:
    """What a step is, in a progress line: its grid cell, or its replicas and load."""
    where = f"{step.replicas} replica{'s' if step.replicas != 1 else ''}, " if step.replicas else ""
    return ", ".join(f"{k}={v}" for k, v in step.meta.items()) or f"{where}{step.scale:g}×"


def _eta(plan: Plan, simulate: bool) -> str:
    """How long a plan takes: wall time in real time; in virtual time only its simulated time (far less wall)."""
    from rushhour.studies.sweep import estimate_s, fmt_duration

    if simulate:
        return f"{fmt_duration(sum(s.duration_s for s in plan.steps))} of simulated time (virtual time: less wall time)"
    return f"about {fmt_duration(estimate_s(plan))}"


def _runner(processes: int, quiet: bool = True, base: str | None = None, total: int = 0,
            simulate: bool = False) -> Any:
    """A ``run_step`` for ``studies.sweep.run_plan``: run the step's scenario, audit it, keep its report.

    A line every few seconds inside the step (``rushhour.progress``): elapsed time, requests done.
    ``simulate``: each step runs in virtual time against the testbed's model (``sim/``) instead.
    """
    from rushhour.audit import run_audit
    from rushhour.loadgen.prepare import RunOptions
    from rushhour.loadgen.runner import run_scenario
    from rushhour.progress import StepWatch
    from rushhour.scenarios import resolve_scenario_path

    allowed = [resolve_scenario_path(base).resolve().parent] if base else []

    def run_step(step: PlannedStep) -> Path | None:
        if simulate:
            from rushhour.sim.run import SimOptions
            from rushhour.sim.run import simulate as run_sim

            run_dir = run_sim(str(step.scenario_path), SimOptions(out_dir=step.dir, allow_paths=allowed)).run_dir
            run_audit(run_dir)
            return run_dir
        # a step's scenario sits in the sweep's folder: its traces may come from the base scenario's
        # a step runs to its end whatever the scenario's `abort:` says: the knee needs the failing steps' figures too
        options = RunOptions(out_dir=step.dir, processes=processes, live=False, allow_paths=allowed, abort=[])
        label = f"step {step.index + 1}/{total} ({_label(step)})" if total else f"step {step.index + 1}"
        with StepWatch(step.dir, label, lambda line: console.print(line, highlight=False, markup=False)):
            result = run_scenario(str(step.scenario_path), options, console=None if quiet else console)
        if result.stop_reason == "interrupted":
            raise KeyboardInterrupt  # Ctrl-C / SIGTERM stops the whole ladder, not just this step
        if result.run_dir is None:
            return None
        run_audit(result.run_dir)
        return result.run_dir

    return run_step


def _progress(total: int, started: float) -> Any:
    import time

    def on_done(step: PlannedStep) -> None:
        elapsed = time.monotonic() - started
        label = _label(step)
        state = f"[red]failed: {step.error}[/]" if step.error else str(step.run_dir)
        console.print(f"  step {step.index + 1}/{total} ({label}) in {elapsed:.0f} s: {state}", highlight=False)

    return on_done


def _summaries(plan: Plan) -> list[tuple[PlannedStep, Any]]:
    from rushhour.audit import load_or_audit

    done = []
    for step in plan.steps:
        if step.run_dir is not None and step.error is None:
            try:
                done.append((step, load_or_audit(step.run_dir)))
            except Exception as exc:  # an unreadable step is reported, the others still count
                step.error = f"audit failed: {exc}"
    return done


def sweep(
    scenario: Annotated[str, typer.Argument(help="scenario file or built-in name")],
    scale: Annotated[str, typer.Option(help="multipliers of today's peak: LOW..HIGH or a list 0.5,1,2")] = "0.25..3",
    steps: Annotated[int, typer.Option(help="number of steps for a LOW..HIGH range", callback=flags.steps)] = 8,
    replicas: Annotated[str | None, typer.Option(help="testbed replica counts to sweep, e.g. 1,2,4")] = None,
    step_duration: Annotated[str, typer.Option(help="steady time per step, e.g. 30s")] = "30s",
    warmup: Annotated[str, typer.Option(help="warm-up at the step's load before it, e.g. 10s (0 = none)")] = "10s",
    cooldown: Annotated[str, typer.Option(help="the step's load kept on, unjudged, after it, e.g. 3s (0 = none): "
                                          "its last requests then wait behind others as under sustained load")] = "0",
    mode: Annotated[str, typer.Option(help="steady: one steady phase per step; scale: scale every phase")] = "steady",
    target_scale: Annotated[float, typer.Option(help="with --replicas: the load (× today's peak) to size for",
                                               callback=flags.target_scale)] = 2.0,
    seed: Annotated[int | None, typer.Option(help="override the scenario seed (same for every step)",
                                             callback=flags.seed)] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="folder for runs")] = Path("runs"),
    processes: Annotated[int, typer.Option(help="Locust processes per step", callback=flags.processes)] = 1,
    search: Annotated[bool, typer.Option("--search", help="bisect the --scale range to the highest load at which "
                                         "every tier meets its SLOs (the SLO boundary), instead of a ladder")] = False,
    precision: Annotated[float, typer.Option(help="--search: stop when the bracket is this narrow "
                                             "(0.1 = the failing level within 10 % of the passing one)",
                                             callback=flags.precision)] = 0.1,
    max_probes: Annotated[int, typer.Option(help="--search: runs in all, repeats included",
                                           callback=flags.max_probes)] = 8,
    repeats: Annotated[int, typer.Option(help="--search: extra runs (other seeds) of a level whose interval "
                                         "straddles a threshold, before it is called inconclusive",
                                         callback=flags.repeats)] = 1,
    simulate: Annotated[bool, typer.Option(help="run every step in virtual time against the testbed's model")] = False,
    preset: Annotated[str | None, typer.Option(help="with --simulate: the replicas' preset, a built-in name or a "
                                              "calibrated preset's .yaml (`rushhour calibrate`)")] = None,
) -> None:
    """Run a ladder of load levels (and replica counts); report every tier's knee and a plain answer.

    With --search: bisect the load to the SLO boundary, with its bracket, per-probe intervals and cliffs.
    """
    import time

    if preset is not None and not simulate:
        raise _fail("--preset sets the simulated replicas' numbers: add --simulate (a real run measures its own)")
    if search:
        if replicas:
            raise _fail("--search finds one boundary: drop --replicas (run one search per replica count)")
        _search(scenario, scale, step_duration, warmup, mode, seed, out_dir, processes, precision, max_probes,
                repeats, simulate, preset, cooldown)

    from rushhour.reports.sweep import write_sweep_reports
    from rushhour.scenarios import ScenarioError, load_scenario
    from rushhour.scenarios.model import parse_duration
    from rushhour.studies.knee import analyse_sweep, step_from_summary
    from rushhour.studies.sweep import SweepError, parse_replicas, parse_scales, plan_sweep, run_plan

    if mode not in ("steady", "scale"):
        raise _fail(f"--mode {mode!r}: use steady or scale")
    try:
        base = _with_preset(load_scenario(scenario), preset)
        plan = plan_sweep(base, parse_scales(scale, steps), out_dir=out_dir, replicas=parse_replicas(replicas),
                          mode=mode, step_duration_s=parse_duration(step_duration),  # type: ignore[arg-type]
                          warmup_s=parse_duration(warmup), seed=seed, cooldown_s=parse_duration(cooldown))
    except (ScenarioError, FileNotFoundError, SweepError, ValueError) as exc:
        raise _fail(str(exc)) from None
    console.print(f"sweep {plan.id}: {len(plan.steps)} steps, {_eta(plan, simulate)}", highlight=False)
    run_plan(plan, _runner(processes, base=scenario, total=len(plan.steps), simulate=simulate),
             _progress(len(plan.steps), time.monotonic()))
    done = _summaries(plan)
    if not done:
        raise _fail("no step produced an audited run", EXIT_USAGE)
    rows = [step_from_summary(s, st.index, st.scale, st.replicas, str(st.run_dir), st.duration_s) for st, s in done]
    result = analyse_sweep(
        rows, sweep_id=plan.id, scenario=base.name, mode=mode, created_at=_now(),
        target_scale=target_scale if replicas else None, description=base.description,
        step_duration_s=plan.meta["step_duration_s"], warmup_s=plan.meta["warmup_s"],
    )
    result.notes += [f"step {st.index} ({st.scale:g}×) failed: {st.error}" for st in plan.steps if st.error]
    paths = write_sweep_reports(result, plan.root)
    for line in result.answers:
        out.print(f"• {line}", highlight=False)
    for kind, path in paths.items():
        out.print(f"{kind:<9} {path.resolve()}", highlight=False)
    raise typer.Exit(EXIT_OK if all(s.error is None for s in plan.steps) else EXIT_USAGE)


def _search(scenario: str, scale: str, step_duration: str, warmup: str, mode: str, seed: int | None,
            out_dir: Path, processes: int, precision: float, max_probes: int, repeats: int,
            simulate: bool = False, preset: str | None = None, cooldown: str = "0") -> None:
    """``sweep --search``: probe, audit, judge with intervals, bisect; write sweep.json with ``search``."""
    from rushhour.reports.sweep import write_sweep_reports
    from rushhour.scenarios import ScenarioError, load_scenario
    from rushhour.scenarios.model import parse_duration
    from rushhour.studies.boundary import Probe, SearchResult, SearchSettings, boundary, next_scale, probe_outcome
    from rushhour.studies.knee import Step, analyse_sweep, step_from_summary
    from rushhour.studies.sweep import SweepError, new_id, parse_scales, plan_step

    if mode not in ("steady", "scale"):
        raise _fail(f"--mode {mode!r}: use steady or scale")
    try:
        base = _with_preset(load_scenario(scenario), preset)
        scales = parse_scales(scale, 2)
        settings = SearchSettings(low=min(scales), high=max(scales), precision=precision, max_probes=max_probes,
                                  repeats=repeats)
        step_s, warm_s, cool_s = parse_duration(step_duration), parse_duration(warmup), parse_duration(cooldown)
    except (ScenarioError, FileNotFoundError, SweepError, ValueError) as exc:
        raise _fail(str(exc)) from None
    if all(t.slo.is_empty() for t in base.tiers):
        raise _fail(f"scenario {base.name!r}: no tier has an SLO, so there is no boundary to search (add slo:)")
    sweep_id = new_id("sweep")
    root = out_dir / sweep_id
    console.print(f"search {sweep_id}: SLO boundary between {settings.low:g}× and {settings.high:g}× today's peak, "
                  f"at most {max_probes} runs of about {step_s + warm_s + cool_s:.0f} s", highlight=False)
    run_step = _runner(processes, base=scenario, total=max_probes, simulate=simulate)
    probes: list[Probe] = []
    steps: list[Step] = []
    errors: list[str] = []
    base_seed = seed if seed is not None else base.seed
    while (level := next_scale(probes, settings)) is not None:
        again = len([p for p in probes if p.scale == level])
        planned = plan_step(base, level, len(probes) + len(errors), root, mode=mode,  # type: ignore[arg-type]
                            step_duration_s=step_s, warmup_s=warm_s, seed=base_seed + again, cooldown_s=cool_s)
        try:
            run_dir = run_step(planned)
            if run_dir is None:
                raise RuntimeError("the run produced no run folder")
            from rushhour.audit import load_or_audit

            row: Step = step_from_summary(load_or_audit(run_dir), planned.index, level, None, str(run_dir),
                                          planned.duration_s)
        except Exception as exc:  # a broken probe ends the search: bisecting past it would guess
            errors.append(f"probe {planned.index} ({level:g}×) failed: {type(exc).__name__}: {exc}")
            console.print(f"  [red]{errors[-1]}[/]", highlight=False)
            break
        probe = probe_outcome(row, base_seed + again)
        probes.append(probe)
        steps.append(row)
        console.print(f"  probe {len(probes)}: {probe.line}", highlight=False, markup=False)
    if not steps:
        raise _fail("no probe produced an audited run")
    found = boundary(probes, steps, settings)
    swept = analyse_sweep(steps, sweep_id=sweep_id, scenario=base.name, mode=mode, created_at=_now(),
                          description=base.description, step_duration_s=step_s if mode == "steady" else None,
                          warmup_s=warm_s if mode == "steady" else None)
    result = SearchResult(**dict(swept), search=found)
    result.answers = [found.sentence, *result.answers]
    result.notes += errors
    paths = write_sweep_reports(result, root)
    for line in result.answers:
        out.print(f"• {line}", highlight=False, markup=False)
    for kind, path in paths.items():
        out.print(f"{kind:<9} {path.resolve()}", highlight=False)
    raise typer.Exit(EXIT_USAGE if errors else EXIT_OK)


def study(
    grid: Annotated[str, typer.Option(help="quick (tests, ~1 min), default (~10 min) or full (hours)")] = "default",
    scenario: Annotated[str, typer.Option(help="the study's base scenario")] = "multitier-study",
    duration: Annotated[str | None, typer.Option(help="override the run time per cell, e.g. 12s")] = None,
    k: Annotated[str | None, typer.Option(help="override the tier counts, e.g. 1,2,4,6,10")] = None,
    seed: Annotated[int | None, typer.Option(help="override the seed (same for every cell)",
                                             callback=flags.seed)] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="folder for runs")] = Path("runs"),
    quick: Annotated[bool, typer.Option("--quick", help="shorthand for --grid quick")] = False,
    from_dir: Annotated[Path | None, typer.Option("--from", help="re-analyse a study folder, run nothing")] = None,
    simulate: Annotated[bool, typer.Option(help="run every cell in virtual time against the testbed's model")] = False,
    preset: Annotated[str | None, typer.Option(help="with --simulate: the replicas' preset, a built-in name or a "
                                              "calibrated preset's .yaml (`rushhour calibrate`)")] = None,
    replicas: Annotated[int | None, typer.Option(help="replicas of every cell (default: the base scenario's)",
                                                callback=flags.sim_replicas)] = None,
    scale: Annotated[float, typer.Option(help="the base workload × this (with --replicas: the study at scale)",
                                        callback=flags.scale)] = 1.0,
) -> None:
    """Reproduce the multi-tier study: K tiers × mixes × loads × fifo / llm-d / headroom, against its claims."""
    import dataclasses
    import time

    from rushhour.reports.sweep import write_study_reports
    from rushhour.scenarios import ScenarioError, load_scenario
    from rushhour.scenarios.model import parse_duration
    from rushhour.studies.knee import analyse_study, study_cell
    from rushhour.studies.sweep import GRIDS, SweepError, existing_study, plan_study, run_plan

    name = "quick" if quick else grid
    if name not in GRIDS:
        raise _fail(f"--grid {grid!r}: use one of {', '.join(GRIDS)}")
    chosen = GRIDS[name]
    try:
        if duration:
            chosen = dataclasses.replace(chosen, duration_s=parse_duration(duration))
        if k:
            chosen = dataclasses.replace(chosen, k=flags.tier_counts(k))
        if preset is not None and not simulate:
            raise ValueError("--preset sets the simulated replicas' numbers: add --simulate")
        base = _with_preset(load_scenario(scenario), preset)
        if replicas is not None or scale != 1.0:
            base = _at_scale(base, replicas, scale)
        plan = existing_study(from_dir) if from_dir else plan_study(base, chosen, out_dir=out_dir, seed=seed)
    except (ScenarioError, FileNotFoundError, SweepError, ValueError) as exc:
        raise _fail(str(exc)) from None
    if from_dir:
        chosen = dataclasses.replace(
            chosen, k=tuple(sorted({s.meta["k"] for s in plan.steps})),
            mixes=tuple(dict.fromkeys(s.meta["mix"] for s in plan.steps)),
            loads=tuple(dict.fromkeys(s.meta["load"] for s in plan.steps)),
            policies=tuple(dict.fromkeys(s.meta["policy"] for s in plan.steps)),
            duration_s=plan.steps[0].duration_s if plan.steps else chosen.duration_s)
        name = f"from {from_dir}"
    else:
        console.print(f"study {plan.id}: {len(plan.steps)} runs ({name} grid), {_eta(plan, simulate)}",
                      highlight=False)
        run_plan(plan, _runner(1, base=scenario, total=len(plan.steps), simulate=simulate),
                 _progress(len(plan.steps), time.monotonic()))
    cells = [study_cell(s, replicas=st.replicas or 1, run_dir=str(st.run_dir), duration_s=st.duration_s,
                        **st.meta) for st, s in _summaries(plan)]
    if not cells:
        raise _fail("no study run produced an audited run")
    notes = [f"grid '{name}': {len(plan.steps)} runs of {chosen.duration_s:g} s; K ∈ {list(chosen.k)}, "
             f"mixes {list(chosen.mixes)}, loads {list(chosen.loads)}, policies {list(chosen.policies)}; "
             f"{base.target.testbed.replicas} '{base.target.testbed.preset}' replicas; seed {seed or base.seed}"
             + ("; simulated (virtual time)" if simulate else "")
             + (f"; base workload × {scale:g}" if scale != 1.0 else "")]
    notes += [f"run {st.index} ({st.meta}) failed: {st.error}" for st in plan.steps if st.error]
    result = analyse_study(cells, study_id=plan.id, created_at=_now(), grid=chosen.as_dict(), notes=notes)
    paths = write_study_reports(result, plan.root)
    for claim in result.claims:
        out.print(f"• [{claim.agrees}] {claim.claim} — ours: {claim.ours}", highlight=False, markup=False)
    for kind, path in paths.items():
        out.print(f"{kind:<9} {path.resolve()}", highlight=False)
    raise typer.Exit(EXIT_OK if all(s.error is None for s in plan.steps) else EXIT_USAGE)


def _with_preset(base: Any, preset: str | None) -> Any:
    """The base scenario's testbed on ``preset`` (--preset; the simulator is imported only then)."""
    if preset is None:
        return base
    from rushhour.sim.run import with_preset

    return with_preset(base, preset)


def _at_scale(base: Any, replicas: int | None, scale: float) -> Any:
    """The study's base scenario on ``replicas`` testbed replicas with its workload × ``scale``."""
    from rushhour.scenarios.loader import revalidate
    from rushhour.sim.run import scale_scenario

    if scale <= 0 or (replicas is not None and replicas < 1):
        raise ValueError("--scale must be > 0 and --replicas at least 1")
    base = scale_scenario(base, scale)
    if replicas is not None:
        testbed = base.target.testbed.model_copy(update={"replicas": replicas})
        base = revalidate(base.model_copy(update={"target": base.target.model_copy(update={"testbed": testbed})}),
                          f"--replicas {replicas}")
    return base


def compare(
    runs: Annotated[list[Path], typer.Argument(help="baseline run folder, then one or more candidate run folders")],
    fail_on_regression: Annotated[bool, typer.Option(help="exit 1 when a candidate regresses")] = False,
    alpha: Annotated[float, typer.Option(help="significance level (Holm-corrected over all gated tests)",
                                        callback=flags.alpha)] = 0.05,
    latency_threshold: Annotated[float, typer.Option(help="practical threshold: p99 relative increase",
                                                    callback=flags.latency_threshold)] = 0.10,
    min_latency_ms: Annotated[float | None, typer.Option(
        min=0, max=3_600_000, show_default=False, help="practical threshold: p99 increase in ms too (a smaller "
        "rise is a busy host's jitter); default 25")] = None,
    drop_threshold: Annotated[float, typer.Option(help="practical threshold: drop-rate increase (0.01 = 1 pt)",
                                                 callback=flags.drop_threshold)] = 0.01,
    correction: Annotated[str, typer.Option(help="holm or none")] = "holm",
    allow_invalid: Annotated[bool, typer.Option(help="judge runs the audit marked invalid (warn, not exit 2)")] = False,
    seed: Annotated[int, typer.Option(help="bootstrap seed", callback=flags.seed)] = 0,
    html: Annotated[Path | None, typer.Option(help="write the HTML comparison here")] = None,
    markdown: Annotated[Path | None, typer.Option(help="write (append) the Markdown comparison here")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write compare.json here")] = None,
) -> None:
    """Compare runs side by side per tier with significance tests: exit 0 ok, 1 regression, 2 invalid."""
    from rushhour.audit.errors import AuditError
    from rushhour.reports.compare import render_compare_html, render_compare_markdown
    from rushhour.studies.compare import MIN_LATENCY_MS, RegressionRule, compare_runs

    if len(runs) < 2:
        raise _fail("compare needs a baseline and at least one candidate run folder")
    missing = [str(r) for r in runs if not (r / "run.json").exists() and not (r / "summary.json").exists()]
    if missing:
        raise _fail(f"not a run folder: {', '.join(missing)}")
    if correction not in ("holm", "none"):
        raise _fail("--correction: holm or none")
    floor = MIN_LATENCY_MS if min_latency_ms is None else min_latency_ms
    rule = RegressionRule(alpha=alpha, latency_rel=latency_threshold, latency_abs_ms=floor, drop_abs=drop_threshold,
                          correction=correction, allow_invalid=allow_invalid)  # type: ignore[arg-type]
    try:
        result = compare_runs(runs, rule, seed=seed)
    except (AuditError, ValueError, OSError) as exc:
        raise _fail(str(exc)) from None
    text = render_compare_markdown(result)
    out.print(text, highlight=False, markup=False)
    if markdown:
        with markdown.open("a") as handle:
            handle.write(text)
    if html:
        html.write_text(render_compare_html(result), encoding="utf-8")
        out.print(f"HTML      {html.resolve()}", highlight=False)
    if json_out:
        json_out.write_text(json.dumps(result.model_dump(mode="json", by_alias=True), indent=2))
    code = result.exit_code
    if code == 1 and not fail_on_regression:
        code = 0
    raise typer.Exit(code)
