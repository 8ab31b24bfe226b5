"""Virtual-time verbs: ``simulate`` (one run) and ``plan`` (capacity planning); registered by ``rushhour.cli``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rushhour import flags
from rushhour.consoles import make_console, print_error

if TYPE_CHECKING:
    from rushhour.scenarios.model import Scenario
    from rushhour.studies.knee import Step

console = make_console(stderr=True)
out = make_console()

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    print_error(console, message)
    return typer.Exit(code)


def simulate(
    scenario: Annotated[str, typer.Argument(help="scenario file or built-in name (see `rushhour scenario list`)")],
    out_dir: Annotated[Path, typer.Option("--out", help="folder for runs")] = Path("runs"),
    duration: Annotated[str | None, typer.Option(help="shorten/stretch phases to this total, e.g. 1h")] = None,
    seed: Annotated[int | None, typer.Option(help="override the scenario seed", callback=flags.seed)] = None,
    profile: Annotated[str | None, typer.Option(help="override the stack profile")] = None,
    replicas: Annotated[int | None, typer.Option(help="simulated replicas (default: the scenario's testbed)",
                                                callback=flags.sim_replicas)] = None,
    scale: Annotated[float, typer.Option(help="workload × this: arrival rates, swarm sizes, replay speed",
                                        callback=flags.scale)] = 1.0,
    grow: Annotated[list[str] | None, typer.Option(help="PERSONA=FACTOR: that persona's workload × FACTOR too "
                                                       "(repeatable: --grow swarm=5 --grow chat=2)")] = None,
    preset: Annotated[str | None, typer.Option(help="the replicas' preset: a built-in name or a calibrated preset's "
                                              ".yaml (`rushhour calibrate`); default: the scenario's")] = None,
    report: Annotated[bool, typer.Option(help="audit and render reports at the end")] = True,
    find_limit: Annotated[bool, typer.Option(
        help="find each tier's limit in this one run, in virtual time: the same controller as `rushhour run "
             "--find-limit` (the scenario's `find_limit:`, else its defaults)")] = False,
    find_limit_persona: Annotated[str | None, typer.Option(
        help="with --find-limit: ramp this persona's load only (the others stay as the scenario has them)")] = None,
) -> None:
    """Run a scenario in virtual time against the testbed's model: same records, audit and reports, in seconds."""
    from rushhour.audit.limit import LimitController
    from rushhour.scenarios import ScenarioError
    from rushhour.scenarios.model import MAX_SIM_REPLICAS
    from rushhour.sim.run import SimOptions, parse_grow
    from rushhour.sim.run import simulate as run_sim

    if replicas is not None and not 1 <= replicas <= MAX_SIM_REPLICAS:
        raise _fail(f"--replicas must be between 1 and {MAX_SIM_REPLICAS:,}, got {replicas:,}")
    if scale <= 0:
        raise _fail("--scale must be > 0")
    try:
        options = SimOptions(out_dir=out_dir, duration=duration, seed=seed, profile=profile, replicas=replicas,
                             scale=scale, grow=parse_grow(grow or []), preset=preset,
                             find_limit=find_limit or bool(find_limit_persona), find_limit_persona=find_limit_persona,
                             limit=LimitController)
        result = run_sim(scenario, options)
    except (ScenarioError, FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from None
    st = result.stats
    console.print(f"simulated {st['simulated_s']:.0f} s on {st['replicas']} replica(s) in {st['wall_s']:.2f} s "
                  f"({st['speedup']}× real time, {st['events']} events; {st['code']})", highlight=False)
    if st["not_modelled"]:
        console.print(f"[yellow]warning:[/] not simulated: {', '.join(st['not_modelled'])}", highlight=False)
    if st.get("imitates"):
        console.print(f"note: {st['imitates']}", highlight=False, markup=False)
    for name, route in (st.get("fallback_routes") or {}).items():
        if route.get("imitates"):
            console.print(f"note: fallback route {name}: {route['imitates']}: its profile {route['profile']!r} ran "
                          "as the testbed's imitation", highlight=False, markup=False)
    out.print(f"run folder: {result.run_dir}", highlight=False)
    if not report:
        raise typer.Exit(result.exit_code)
    from rushhour.audit import AuditError, report_table, run_audit
    from rushhour.reports import print_terminal, write_reports

    try:
        summary = run_audit(result.run_dir)
        paths = write_reports(summary, result.run_dir, report_table(result.run_dir))
    except AuditError as exc:
        raise _fail(str(exc)) from None
    print_terminal(summary, out)
    out.print(f"HTML report: {paths['html'].resolve()}", highlight=False)
    raise typer.Exit(EXIT_OK)


def plan(
    scenario: Annotated[str | None, typer.Argument(
        help="scenario file or built-in name (with --from-planner: the mix to hold the plan to; default: one "
        "derived from it)")] = None,
    replicas: Annotated[str | None, typer.Option(
        help="replica counts: LOW..HIGH (doubling) or a list 8,16,64 (default 8..512; with --from-planner: the "
        "planner's count)")] = None,
    scale: Annotated[str | None, typer.Option(help="workload multipliers: LOW..HIGH (with --steps) or a list 1,2 "
                                                   "(default 1..10; with --from-planner: 1)")] = None,
    steps: Annotated[int, typer.Option(help="number of scales for a LOW..HIGH range", callback=flags.steps)] = 4,
    grow: Annotated[list[str] | None, typer.Option(help="PERSONA=FACTOR: that persona grown first, every cell "
                                                       "(repeatable: --grow swarm=5 --grow chat=2 --scale 1)")] = None,
    duration: Annotated[str | None, typer.Option(help="simulated time per cell (the phases stretched to it; default "
                                                     "60s, with --find-limit: the scenario's own, each run's cap)")
                        ] = None,
    gpus_per_replica: Annotated[int | None, typer.Option(help="GPUs one replica holds (GPU-hours; default 1, with "
                                                              "--from-planner: its tensor parallel)",
                                                         callback=flags.gpus_per_replica)] = None,
    gpu_hour_price: Annotated[float | None, typer.Option(help="price of one GPU-hour, for a cost column",
                                                         callback=flags.gpu_hour_price)] = None,
    gate: Annotated[bool, typer.Option(help="exit 1 when a scale has no replica count meeting every SLO (with "
                                            "--from-planner: also when the planner's count fails the mix)")] = False,
    seed: Annotated[int | None, typer.Option(help="override the scenario seed (same for every cell)",
                                             callback=flags.seed)] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="folder for runs")] = Path("runs"),
    from_planner: Annotated[Path | None, typer.Option(
        "--from-planner", help="an llm-d-planner recommendation (JSON): its GPU and model as a preset, its replica "
        "count, traffic profile and SLOs, checked under a tiered mix")] = None,
    peak: Annotated[float, typer.Option(help="with --from-planner: the mix's peak phase runs chat at this × the "
                                             "planner's rate", callback=flags.peak)] = 2.0,
    batch_agents: Annotated[int | None, typer.Option(help="with --from-planner: agents of the mix's batch swarm "
                                                          "(default 10 per replica; 0: none)",
                                                     callback=flags.batch_agents)] = None,
    preset: Annotated[str | None, typer.Option(help="the replicas' preset: a built-in name or a calibrated preset's "
                                              ".yaml (`rushhour calibrate`); default: the scenario's")] = None,
    find_limit: Annotated[bool, typer.Option(
        help="answer the other way round: per replica count, the load each tier carries (one simulated "
             "`--find-limit` run each, the scenario's `find_limit:` ramp scaled with the cluster; replicas default "
             "1..8)")] = False,
    find_limit_persona: Annotated[str | None, typer.Option(
        help="with --find-limit: ramp this persona's load only (the others stay as the scenario has them)")] = None,
) -> None:
    """Capacity plan in virtual time: per tier the knee, per scale the smallest replica count meeting every SLO."""
    import datetime as dt
    import time

    from rushhour.reports.plan import write_plan_reports
    from rushhour.scenarios import ScenarioError
    from rushhour.scenarios.planner import PlannerError
    from rushhour.sim.run import SimOptions, parse_grow, prepare, replica_ladder, scale_scenario
    from rushhour.studies.knee import analyse_sweep
    from rushhour.studies.plan import analyse_plan, planner_check, scale_answer
    from rushhour.studies.sweep import SweepError, new_id, parse_scales

    if scenario is None and from_planner is None:
        raise _fail("give a SCENARIO, or --from-planner FILE (an llm-d-planner recommendation)")
    if preset is not None and from_planner is not None:
        raise _fail("--preset and --from-planner both name the replicas' preset: give one")
    if find_limit or find_limit_persona:
        if from_planner is not None or scale is not None:
            raise _fail("--find-limit searches the load itself: give neither --scale nor --from-planner")
        assert scenario is not None
        raise typer.Exit(_plan_limits(scenario, replicas or "1..8", duration, seed, grow, preset, out_dir, gate,
                                      find_limit_persona))
    plan_id = new_id("plan")
    root = Path(out_dir) / plan_id
    imported = None
    try:
        grown = parse_grow(grow or [])
        if from_planner is not None:
            from rushhour.from_planner import import_plan

            imported = import_plan(from_planner, scenario, root, duration=duration or "60s", seed=seed, grow=grown,
                                   peak=peak, batch_agents=batch_agents)
            base, source = imported.mix, imported.mix_source
            ladder = sorted({*replica_ladder(replicas), imported.rec.replicas} if replicas else
                            {imported.rec.replicas})
            scales = sorted({*parse_scales(scale, steps), 1.0} if scale else {1.0})
            gpus = gpus_per_replica or imported.rec.tensor_parallel
        else:
            assert scenario is not None
            ladder = replica_ladder(replicas or "8..512")
            scales = parse_scales(scale or "1..10", steps)
            base = prepare(scenario, SimOptions(duration=duration or "60s", seed=seed, grow=grown, preset=preset))
            source = scenario
            gpus = gpus_per_replica or 1
        for s in scales:  # every cell within the limits before the first one runs
            scale_scenario(base, s)
    except (ScenarioError, PlannerError, FileNotFoundError, SweepError, ValueError) as exc:
        raise _fail(str(exc)) from None
    cells = len(ladder) * len(scales)
    from rushhour.sim.compiled import status

    console.print(f"plan {plan_id}: {len(ladder)} replica counts × {len(scales)} scales = {cells} simulated runs of "
                  f"{base.duration_s:g} s ({status()})", highlight=False)
    started = time.monotonic()
    from rushhour.calibrate import preset_note

    notes: list[str] = [preset_note(base.target.testbed.preset)]  # what every cell's replicas rest on, and how good
    profile_step = None
    if imported is not None:
        notes += imported.notes
        for line in imported.notes:
            console.print(f"  note: {line}", highlight=False, markup=False)
        profile_step = _cell(imported.profile, imported.profile_source, root / "planner-profile",
                             imported.rec.replicas, 1.0, {}, 0, "the planner's own profile")
    if grown:  # said where the plan's answers are read: they are for the grown workload
        notes.append("personas grown before every scale: " + ", ".join(f"{n} ×{f:g}" for n, f in grown.items()))
        console.print(f"  {notes[-1]}", highlight=False)
    done, not_run = _grid(base, source, root, ladder, scales, grown, notes)
    created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    sweep = analyse_sweep(done, sweep_id=plan_id, scenario=base.name, mode="simulated", created_at=created)
    check = None
    if imported is not None:  # the planner's count at the planner's load (scale 1), and what the mix needs there
        mix_step = next((s for s in done if s.scale == 1.0 and s.replicas == imported.rec.replicas), None)
        needed = scale_answer(done, 1.0, ladder).replicas_needed
        check = planner_check(imported.rec, profile_step, mix_step, needed, imported.mix_text)
    outcome = analyse_plan(done, sweep, plan_id=plan_id, scenario=base.name, created_at=created, replicas=ladder,
                           scales=scales, duration_s=base.duration_s, preset=base.target.testbed.preset,
                           gpus_per_replica=gpus, price=gpu_hour_price, notes=notes, planner=check)
    paths = write_plan_reports(outcome, root)
    for line in outcome.sentences:
        out.print(f"• {line}", highlight=False, markup=False)
    for kind, path in paths.items():
        out.print(f"{kind:<9} {path.resolve()}", highlight=False)
    skipped = f" ({not_run} not run: nothing there could pass)" if not_run else ""
    took = time.monotonic() - started
    console.print(f"{cells - not_run} runs simulated in {took:.0f} s{skipped}", highlight=False)
    failed = not outcome.all_answered or (check is not None and check.mix_status != "pass")
    raise typer.Exit(EXIT_FAIL if gate and failed else EXIT_OK)


def _plan_limits(scenario: str, replicas: str, duration: str | None, seed: int | None, grow: list[str] | None,
                 preset: str | None, out_dir: Path, gate: bool, persona: str | None = None) -> int:
    """plan --find-limit: one simulated find-limit run per replica count; the table, plan-limit.json and .md."""
    import json
    import time

    from rushhour.plan_limit import limit_cell
    from rushhour.reports.plan_limit import markdown, sentences
    from rushhour.scenarios import ScenarioError
    from rushhour.sim.run import SimOptions, parse_grow, prepare, replica_ladder
    from rushhour.studies.sweep import new_id

    try:
        ladder = replica_ladder(replicas)
        base = prepare(scenario, SimOptions(duration=duration, seed=seed, grow=parse_grow(grow or []),
                                            preset=preset, find_limit=True, find_limit_persona=persona))
    except (ScenarioError, FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from None
    root = Path(out_dir) / new_id("plan")
    console.print(f"plan {root.name} --find-limit: {len(ladder)} simulated find-limit runs of at most "
                  f"{base.duration_s:g} s each", highlight=False)
    started = time.monotonic()
    rows = []
    for r in ladder:
        try:
            rows.append(limit_cell(base, scenario, root / f"r{r}", r))
        except ValueError as exc:
            raise _fail(str(exc)) from None
        console.print(f"  {sentences(rows[-1:])[0]}", highlight=False, markup=False)
    notes = [f"each size's ramp is the scenario's find_limit: start and max_scale × replicas / "
             f"{base.target.testbed.replicas} (its own testbed's count): the same load per replica searched"]
    (root / "plan-limit.json").write_text(json.dumps({"replicas": ladder, "rows": rows, "notes": notes}, indent=1))
    (root / "plan-limit.md").write_text(markdown(rows, notes))
    for line in sentences(rows):
        out.print(f"• {line}", highlight=False, markup=False)
    out.print(f"markdown  {(root / 'plan-limit.md').resolve()}", highlight=False)
    console.print(f"{len(rows)} runs simulated in {time.monotonic() - started:.0f} s", highlight=False)
    unanswered = any((row["found"] or {}).get("status") != "within" for row in rows)
    return EXIT_FAIL if gate and unanswered else EXIT_OK


def _cell(cell: Scenario, source: str, folder: Path, replicas: int, scale: float, grown: dict[str, float], index: int,
          label: str) -> Step:
    """One simulated, audited cell of the grid, said on one line."""
    from rushhour.audit import run_audit
    from rushhour.sim.run import SimOptions, simulate_scenario
    from rushhour.studies.knee import step_from_summary

    # the cell is already grown and scaled; its options only record how (run.json simulation)
    result = simulate_scenario(cell, source, SimOptions(out_dir=folder, replicas=replicas, scale=scale, grow=grown))
    step = step_from_summary(run_audit(result.run_dir), index, scale, replicas, str(result.run_dir), cell.duration_s)
    verdict = ", ".join(f"{t.tier} {t.status}" for t in step.tiers)
    console.print(f"  {label}: {step.offered_rps:.1f} req/s issued · {verdict} · simulated in "
                  f"{result.stats['wall_s']:.1f} s", highlight=False)
    return step


def _grid(base: Scenario, source: str, root: Path, ladder: list[int], scales: list[float], grown: dict[str, float],
          notes: list[str]) -> tuple[list[Step], int]:
    """Every (replicas × scale) cell; a replica count whose tiers all failed skips its higher scales."""
    from rushhour.sim.run import scale_scenario

    done: list[Step] = []
    not_run = 0
    for r in ladder:
        all_failed_below: float | None = None
        for s in scales:
            label = f"{r} replica{'' if r == 1 else 's'}, {s:g}×"
            if all_failed_below is not None:  # fail closed, but do not simulate what cannot pass
                notes.append(f"{label}: not run — every tier with an SLO already failed at {all_failed_below:g}×")
                not_run += 1
                console.print(f"  {notes[-1]}", highlight=False)
                continue
            step = _cell(scale_scenario(base, s), source, root / f"r{r}-x{s:g}", r, s, grown, len(done), label)
            done.append(step)
            judged = [t for t in step.tiers if t.status in ("pass", "fail")]
            if judged and all(t.status == "fail" for t in judged):
                all_failed_below = s
    return done, not_run
