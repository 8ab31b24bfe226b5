"""rushhour audit: records → classified outcomes → per-tier figures, checks and verdicts → summary.json."""

from __future__ import annotations

from pathlib import Path

from audit.build import SUMMARY_FILE, audit_run, write_summary
from audit.errors import AuditError
from audit.summary import Summary

__all__ = ["AuditError", "Summary", "load_or_audit", "run_audit"]


def run_audit(
    run_dir: Path, *, slo_file: Path | None = None, judge: str | None = None, write: bool = True
) -> Summary:
    """Load, classify and compute a run; write ``run_dir/summary.json`` (unless ``write=False``)."""
    summary = audit_run(Path(run_dir), slo_file=slo_file, judge=judge)
    if write:
        write_summary(summary, Path(run_dir))
    return summary


def _inputs_mtime(run_dir: Path) -> float:
    paths = [run_dir / "run.json", run_dir / "metrics.jsonl", *sorted((run_dir / "records").glob("*.jsonl"))]
    return max((p.stat().st_mtime for p in paths if p.exists()), default=0.0)


def load_or_audit(run_dir: Path) -> Summary:
    """The existing ``summary.json`` when it is newer than every input, else a fresh audit."""
    run_dir = Path(run_dir)
    path = run_dir / SUMMARY_FILE
    if path.exists() and path.stat().st_mtime >= _inputs_mtime(run_dir):
        try:
            return Summary.model_validate_json(path.read_text())
        except ValueError:
            pass  # an older or damaged summary: audit again
    return run_audit(run_dir)
