"""``rushhour history RUNS_DIR…``: read audited runs, write the trend (Parquet + HTML), judge the newest run.

Each argument is a run folder or a folder holding run folders (``runs/``, a ``--repeat`` folder, or
``runs/`` with repeat folders inside: two levels down). A run not yet audited is audited (as
``rushhour report`` does); one that cannot be (nothing ran, a broken folder) is skipped and named.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rushhour.studies.between import LEVEL, MIN_RUNS
from rushhour.studies.compare import RegressionRule
from rushhour.studies.history import (
    FoundRun,
    HistoryResult,
    HistoryRun,
    judge_newest,
    newest_problems,
    order_runs,
    trend_rows,
    trend_table,
)

HISTORY_PARQUET, HISTORY_HTML, HISTORY_JSON = "history.parquet", "history.html", "history.json"
MAX_RUN_JSON = 16 << 20  # bytes of run.json read to find its run id (a hostile file is cut, then refused)


def find_runs(paths: list[Path]) -> list[Path]:
    """Run folders (holding run.json) named, or found one or two levels below the folders named."""
    found: list[Path] = []
    for path in paths:
        if (path / "run.json").is_file():
            found.append(path)
            continue
        for child in sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []:
            if (child / "run.json").is_file():
                found.append(child)
            else:
                found += sorted(g for g in child.iterdir() if g.is_dir() and (g / "run.json").is_file())
    unique: dict[Path, None] = {}
    for run in found:
        unique.setdefault(run.resolve(), None)
    return list(unique)


def _run_id(run_dir: Path) -> str | None:
    """run.json's run id, read without the audit (a broken run too); None when it cannot be read."""
    try:
        with (run_dir / "run.json").open("rb") as handle:
            data = json.loads(handle.read(MAX_RUN_JSON + 1)[:MAX_RUN_JSON])
    except (OSError, ValueError):
        return None
    value = data.get("run_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def build_history(paths: list[Path], out_dir: Path, window: int,
                  rule: RegressionRule | None = None) -> tuple[HistoryResult, list[dict[str, Any]]]:
    """Load, order, write history.parquet/.json/.html into ``out_dir``; the result and the trend rows."""
    from rushhour.audit import AuditError, IntegrityError, load_or_audit
    from rushhour.reports.history import render_history_html
    from rushhour.studies.compare import load_run

    runs, skipped, found = [], [], []
    for run_dir in find_runs(paths):
        try:
            runs.append(HistoryRun(run_dir, load_or_audit(run_dir)))
            found.append(FoundRun(run_dir, _run_id(run_dir), runs[-1].summary.run.started_at))
        except IntegrityError:
            raise  # an edited or damaged audit is refused, not skipped: the caller names it (exit 2)
        except (AuditError, OSError, ValueError) as exc:
            skipped.append(f"{run_dir}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            found.append(FoundRun(run_dir, _run_id(run_dir), None, skipped[-1].split(": ", 1)[1]))
    runs = order_runs(runs)
    rows = trend_rows(runs)
    rule = rule or RegressionRule()
    result = HistoryResult(runs=len(runs), scenarios=list(dict.fromkeys(r.summary.run.scenario for r in runs)),
                           skipped=skipped, window_asked=window, exit_code=2,
                           rule={"level": LEVEL, "alpha": rule.alpha, "min_change": rule.latency_rel,
                                 "min_latency_ms": rule.latency_abs_ms, "min_drop_change": rule.drop_abs,
                                 "min_runs": MIN_RUNS})
    if runs:
        result.newest = runs[-1].summary.run.run_id
        scenario = runs[-1].summary.run.scenario
        needed = [r for r in runs if r.summary.run.scenario == scenario and r.summary.validity.valid
                  and not r.summary.run.interrupted][-(window + 1):]
        for run in {id(r): r for r in [*needed, runs[-1]]}.values():
            run.samples = load_run(run.run_dir)[1]
        verdict = judge_newest(runs, window, rule)
        result.window, result.comparison, result.exit_code = verdict.window, verdict.comparison, verdict.exit_code
        result.regressions, result.notes = verdict.regressions, verdict.notes
        result.method, result.judgements = verdict.method, verdict.judgements
    else:
        result.notes = ["no audited run found"]
    problems = newest_problems(found)
    if problems:  # the run judged above may not be the newest: never a pass
        result.notes, result.exit_code = [*problems, *result.notes], 2
    out_dir.mkdir(parents=True, exist_ok=True)
    trend_table(rows).to_parquet(out_dir / HISTORY_PARQUET, index=False)
    _write(out_dir / HISTORY_JSON, json.dumps(result.model_dump(mode="json", by_alias=True), indent=2) + "\n")
    _write(out_dir / HISTORY_HTML, render_history_html(result, rows))
    return result, rows


def parse_percent(value: str, *, what: str) -> float:
    """'10%', '10 %', '10', '1pt' → a fraction (0.10, 0.01); ValueError naming ``what`` otherwise."""
    raw = value.strip().lower()
    for suffix in ("%", "pt", "pts", "points"):
        if raw.endswith(suffix):
            raw = raw[: -len(suffix)].strip()
            break
    try:
        number = float(raw)
    except ValueError:
        raise ValueError(f"{what}: {value!r} is not a percentage (e.g. 10%)") from None
    if not 0 <= number <= 1000:  # NaN fails too
        raise ValueError(f"{what}: {value!r} is outside 0–1000 %")
    return number / 100
