"""``rushhour run SCENARIO --repeat N``: N runs with seeds derived from the scenario's, each audited, then aggregated.

The runs go into one folder, ``<out>/repeat-<id>/``, each in its own run folder as ``rushhour run``
makes it; ``repeat.json`` (studies/repeat.py ``RepeatSummary``), ``repeat.md`` and ``repeat.html`` (every
run's figures, the mean and its interval; reports/repeat.py) sit beside them.
A run that is interrupted (Ctrl-C) or cannot start ends the repeat there; the runs done so far are
aggregated, and the repeat's exit code says it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from rushhour.loadgen.prepare import RunOptions, apply_overrides
from rushhour.loadgen.runkey import new_run_id
from rushhour.loadgen.runner import RunResult, run_scenario
from rushhour.scenarios import load_scenario
from rushhour.studies.repeat import GateOn, RepeatRun, RepeatSummary, aggregate, derive_seed

REPEAT_JSON, REPEAT_MD = "repeat.json", "repeat.md"
EXIT_INTERRUPTED = 130


def _slos(scenario: Any) -> dict[str, tuple[Literal["point", "bound"], float | None, dict[str, float]]]:
    """Per tier: (judge, max_drop_rate, ttft_ms limits) — what the aggregate is judged against."""
    out: dict[str, tuple[Literal["point", "bound"], float | None, dict[str, float]]] = {}
    for tier in scenario.tiers:
        slo = tier.slo
        ttft = dict(slo.ttft_ms.items()) if slo.ttft_ms is not None else {}
        out[tier.name] = (slo.judge, slo.max_drop_rate, ttft)
    return out


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def run_repeated(name: str, options: RunOptions, repeat: int, gate_on: GateOn, console: Any, out: Any,
                 report: bool = True) -> tuple[Path, RepeatSummary | None, int]:
    """Run ``repeat`` times; returns (the repeat's folder, its summary, the exit code)."""
    from rushhour.audit import AuditError, report_table, run_audit
    from rushhour.reports import write_reports
    from rushhour.reports.repeat import REPEAT_HTML, print_repeat, render_markdown, render_repeat_html

    scenario = apply_overrides(load_scenario(name), options)  # the base seed: --seed, else the scenario's
    base_seed = scenario.seed
    folder = (Path(options.out_dir) / f"repeat-{new_run_id()}").resolve()
    folder.mkdir(parents=True)
    summaries, runs = [], []
    stopped: int | None = None
    for index in range(1, repeat + 1):
        seed = derive_seed(base_seed, index)
        console.print(f"repeat {index}/{repeat}: seed {seed}", highlight=False)
        opts = RunOptions(**{**options.__dict__, "out_dir": folder, "seed": seed})
        try:
            result: RunResult = run_scenario(name, opts, console=console)
            if result.run_dir is None or result.stop_reason in ("startup_error", "disk_full"):
                stopped = result.exit_code or 2
                break
            summary = run_audit(result.run_dir)
            if report:
                write_reports(summary, result.run_dir, report_table(result.run_dir))
        except AuditError as exc:
            if result.exit_code == EXIT_INTERRUPTED:  # Ctrl-C before the run recorded anything (its start-up)
                console.print(f"run {index} was interrupted before it recorded anything: not counted",
                              highlight=False, markup=False)
                stopped = EXIT_INTERRUPTED
                break
            console.print(f"error: run {index}: {exc}", highlight=False, markup=False)
            stopped = 2
            break
        except KeyboardInterrupt:  # Ctrl-C between two runs (during an audit): keep what is done
            stopped = EXIT_INTERRUPTED
            break
        summaries.append(summary)
        runs.append(RepeatRun(index=index, seed=seed, run_id=summary.run.run_id, folder=result.run_dir.name,
                              exit_code=summary.exit_code, passed=summary.passed, valid=summary.validity.valid,
                              stop_reason=summary.run.stop_reason))
        out.print(f"repeat {index}/{repeat}: {result.run_dir} → exit {summary.exit_code}", highlight=False)
        if result.exit_code == EXIT_INTERRUPTED:
            stopped = EXIT_INTERRUPTED
            break
    if not summaries:
        return folder, None, stopped or 2
    agg = aggregate(summaries, runs, scenario.name, base_seed, _slos(scenario), gate_on)
    if stopped is not None or len(runs) < repeat:  # fewer runs than asked: never a pass (a known fail stays 1)
        agg.exit_code = EXIT_INTERRUPTED if stopped == EXIT_INTERRUPTED else (1 if agg.exit_code == 1 else 2)
    _write(folder / REPEAT_JSON, json.dumps(agg.model_dump(mode="json", by_alias=True), indent=2) + "\n")
    _write(folder / REPEAT_MD, render_markdown(agg))
    _write(folder / REPEAT_HTML, render_repeat_html(agg, folder))
    print_repeat(agg, out)
    out.print(f"repeat folder: {folder}", highlight=False)
    out.print(f"HTML report: {folder / REPEAT_HTML}", highlight=False)
    return folder, agg, agg.exit_code


def read_repeat(folder: Path) -> RepeatSummary:
    """``repeat.json`` of a repeat folder (OSError/ValueError when missing or not one)."""
    return RepeatSummary.model_validate_json((Path(folder) / REPEAT_JSON).read_text())
