"""rushhour audit: records → classified outcomes → per-tier figures, checks and verdicts → summary.json."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from audit import table as _table
from audit.build import SUMMARY_FILE, audit, write_summary
from audit.errors import AuditError
from audit.summary import Summary
from loadgen.columns import file_print

__all__ = ["AuditError", "Summary", "attempts", "current_summary", "load_or_audit", "run_audit"]

_PACKAGES = ("audit", "stacks", "scenarios")  # the code a summary and its table depend on
# and the loadgen modules the audit reads records and run.json through (a new parser or sidecar: re-audit)
_MODULES = ("loadgen/record.py", "loadgen/columns.py", "loadgen/manifest.py", "loadgen/diagnose.py")


@cache
def code_version() -> str:
    """A hash of the sources the audit's answer depends on (new code: re-audit)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    paths = [p for package in _PACKAGES for p in sorted((root / package).glob("*.py"))]
    for path in paths + [root / m for m in _MODULES]:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _inputs(run_dir: Path) -> dict[str, Any]:
    """Everything an audit of ``run_dir`` depends on: the table's fingerprint, metrics.jsonl and the code."""
    inputs = _table.fingerprint(run_dir)
    metrics = run_dir / "metrics.jsonl"
    inputs["metrics"] = file_print(metrics) if metrics.exists() else None
    inputs["code"] = code_version()
    return inputs


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_audit(
    run_dir: Path, *, slo_file: Path | None = None, judge: str | None = None, write: bool = True
) -> Summary:
    """Load, classify and compute a run; write ``summary.json`` and ``attempts.parquet`` (unless ``write=False``)."""
    run_dir = Path(run_dir)
    if not write:
        return audit(run_dir, slo_file=slo_file, judge=judge).summary
    inputs = _inputs(run_dir)  # taken before reading: a shard that grows meanwhile is stale
    writer = _table.TableWriter(run_dir)  # the table is encoded on a second thread while the summary is finished
    try:
        result = audit(run_dir, slo_file=slo_file, judge=judge, table_writer=writer)
        path = write_summary(result.summary, run_dir)
        writer.finish({**inputs, "summary_sha256": _sha256(path)})
    except BaseException:
        writer.abort()
        raise
    return result.summary


def current_summary(run_dir: Path) -> Summary | None:
    """The run's ``summary.json`` when nothing it was audited from changed (inputs, rules, code), else None."""
    run_dir = Path(run_dir)
    path = run_dir / SUMMARY_FILE
    stored = _table.stored_inputs(run_dir)
    if stored is None or not path.exists():
        return None
    if stored.get("summary_sha256") != _sha256(path) or {**stored, "summary_sha256": None} != {
            **_inputs(run_dir), "summary_sha256": None}:
        return None
    try:
        return Summary.model_validate_json(path.read_text())
    except ValueError:
        return None


def _inputs_mtime(run_dir: Path) -> float:
    paths = [run_dir / "run.json", run_dir / "metrics.jsonl", *sorted((run_dir / "records").glob("*.jsonl"))]
    return max((p.stat().st_mtime for p in paths if p.exists()), default=0.0)


def load_or_audit(run_dir: Path) -> Summary:
    """The existing ``summary.json`` when it is current, else a fresh audit.

    Current: its attempts table's fingerprint matches the run's inputs, rules and code; a folder
    without a table (an older audit, or a copied summary.json) falls back to "newer than every input".
    """
    run_dir = Path(run_dir)
    found = current_summary(run_dir)
    if found is not None:
        return found
    path = run_dir / SUMMARY_FILE
    if _table.stored_inputs(run_dir) is None and path.exists() and path.stat().st_mtime >= _inputs_mtime(run_dir):
        try:
            return Summary.model_validate_json(path.read_text())
        except ValueError:
            pass  # an older or damaged summary: audit again
    return run_audit(run_dir)


def attempts(run_dir: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """The run's classified attempts table (``attempts.parquet``), re-auditing first when it is stale."""
    run_dir = Path(run_dir)
    stored = _table.stored_inputs(run_dir)
    current = _inputs(run_dir)
    if stored is None or {**stored, "summary_sha256": None} != {**current, "summary_sha256": None}:
        try:
            run_audit(run_dir)
        except OSError:  # a read-only run folder: audit in memory, the answer is the same
            built = audit(run_dir, with_table=True).table
            assert built is not None
            frame = _table.to_frame(built)
            return frame[columns] if columns else frame
    return _table.read_table(run_dir, columns)
