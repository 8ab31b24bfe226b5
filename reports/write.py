"""Write every report file of a run folder."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from rushhour.audit.integrity import record_outputs
from rushhour.audit.summary import Summary
from rushhour.reports import drops
from rushhour.reports.br02 import BR02_FILE, render_br02_yaml
from rushhour.reports.html import render_html
from rushhour.reports.junit import render_junit
from rushhour.reports.markdown import render_markdown


def _write(path: Path, text: str) -> Path:
    """Write atomically, so a reader never sees half a report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # no half-written file left behind
        raise
    return path


def write_reports(summary: Summary, run_dir: Path, table: pd.DataFrame | None = None) -> dict[str, Path]:
    """Write report.html, report.md, junit.xml and drops.csv into ``run_dir``, from the summary and the audit's
    attempts table (``audit.report_table``; None: the drops from the summary's evidence)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    csv_text = drops.render_csv(drops.drop_rows(summary, table))
    paths = {
        "drops_csv": _write(run_dir / "drops.csv", csv_text),
        "html": _write(run_dir / "report.html", render_html(summary, table, csv_text)),
        "markdown": _write(run_dir / "report.md", render_markdown(summary)),
        "junit": _write(run_dir / "junit.xml", render_junit(summary)),
    }
    record_outputs(run_dir, [p.name for p in paths.values()])  # integrity.json names them (an audited folder's)
    return paths


def write_br02(summary: Summary, run_dir: Path, table: pd.DataFrame | None = None,
               path: Path | None = None, experiment_id: str | None = None) -> Path:
    """Write the run as llm-d-benchmark's benchmark report v0.2 (``path``, a file or a folder; default
    ``run_dir``/BR02_FILE)."""
    run_dir = Path(run_dir)
    target = Path(path) if path is not None else run_dir / BR02_FILE
    if target.is_dir():  # a results folder: the report under llm-d-benchmark's name for it
        target = target / BR02_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    _write(target, render_br02_yaml(summary, table, experiment_id))
    if target.resolve().parent == run_dir.resolve():  # a file of the run folder: integrity.json names it too
        record_outputs(run_dir, [target.name])
    return target
