"""rushhour audit: records → classified outcomes → per-tier figures, checks and verdicts → summary.json."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from pyarrow.lib import ArrowException

from rushhour.audit import integrity
from rushhour.audit import table as _table
from rushhour.audit.build import SUMMARY_FILE, audit, write_summary
from rushhour.audit.errors import AuditError
from rushhour.audit.summary import Summary
from rushhour.records.columns import file_print

__all__ = ["AuditError", "IntegrityError", "Summary", "attempts", "current_summary", "load_or_audit", "report_table",
           "run_audit"]

IntegrityError = integrity.IntegrityError
_BINDING = ("summary_sha256", "inputs_sha256")  # what the table's metadata adds to the inputs' fingerprint

# The code a summary and its table depend on: the audit and exactly the packages it may import (the architecture
# test holds this to its layer table), so editing a study or a report never marks a stored summary stale.
FINGERPRINTED = ("audit", "records", "scenarios", "stacks")


@cache
def code_version() -> str:
    """A hash of the sources the audit's answer depends on (new code: re-audit)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in (p for package in FINGERPRINTED for p in sorted((root / package).rglob("*.py"))):
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
    # every input's SHA-256 for integrity.json, on a thread of its own (hashlib lets go of the GIL: ~1 GB/s a core)
    previous = integrity.previous_manifest(run_dir)
    with ThreadPoolExecutor(max_workers=1) as pool:
        hashed = pool.submit(integrity.hash_inputs, run_dir, previous)
        try:
            result = audit(run_dir, slo_file=slo_file, judge=judge, table_writer=writer)
            digests = hashed.result()
            integrity.unseal(run_dir)  # killed from here on: an unsealed folder, audited again, never a stale seal
            path = write_summary(result.summary, run_dir)
            bound = {"summary_sha256": _sha256(path), "inputs_sha256": integrity.inputs_digest(digests)}
            writer.finish({**inputs, **bound})
        except BaseException:
            writer.abort()
            raise
    integrity.seal(run_dir, result.summary.run.run_id, digests, integrity.TABLE_AND_SUMMARY, previous)
    return result.summary


def _unbound(inputs: dict[str, Any]) -> dict[str, Any]:
    """The table's fingerprint without what binds it to its outputs and manifest (compared with the run now)."""
    return {k: v for k, v in inputs.items() if k not in _BINDING}


def _checked_table(run_dir: Path) -> tuple[dict[str, Any] | None, bool]:
    """(the table's stored fingerprint, whether the folder is sealed); IntegrityError when the table or the summary
    is not what the audit wrote (``integrity.json``)."""
    stored = _table.stored_inputs(run_dir)
    manifest = integrity.check_outputs(run_dir, table_inputs_sha256=(stored or {}).get("inputs_sha256"))
    return stored, manifest is not None


def current_summary(run_dir: Path) -> Summary | None:
    """The run's ``summary.json`` when nothing it was audited from changed (inputs, rules, code), else None.

    IntegrityError when the summary or the table is not the one the audit wrote (``integrity.json``); a
    folder without a manifest (audited before manifests) is not current.
    """
    run_dir = Path(run_dir)
    path = run_dir / SUMMARY_FILE
    stored, sealed = _checked_table(run_dir)
    if stored is None or not sealed or not path.exists():
        return None
    if stored.get("summary_sha256") != _sha256(path) or _unbound(stored) != _unbound(_inputs(run_dir)):
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
    unsealed = not (run_dir / integrity.INTEGRITY_FILE).exists()
    if unsealed and _table.stored_inputs(run_dir) is None and path.exists() and \
            path.stat().st_mtime >= _inputs_mtime(run_dir):
        try:
            return Summary.model_validate_json(path.read_text())
        except ValueError:
            pass  # an older or damaged summary: audit again
    return run_audit(run_dir)


def report_table(run_dir: Path) -> pd.DataFrame | None:
    """The classified attempts a run's reports list (its drops), or None for a folder without records (a summary
    brought alone): what the CLI hands the renderers, which never read a run folder themselves."""
    if not any((Path(run_dir) / "records").glob("*.jsonl")):
        return None
    return attempts(run_dir)


def attempts(run_dir: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """The run's classified attempts table (``attempts.parquet``), re-auditing first when it is stale or unsealed.

    IntegrityError (one line naming the file) when the table is not the one the audit wrote.
    """
    run_dir = Path(run_dir)
    stored, sealed = _checked_table(run_dir)
    if stored is None or not sealed or _unbound(stored) != _unbound(_inputs(run_dir)):
        try:
            run_audit(run_dir)
        except OSError:  # a read-only run folder: audit in memory, the answer is the same
            built = audit(run_dir, with_table=True).table
            assert built is not None
            frame = _table.to_frame(built)
            return frame[columns] if columns else frame
    try:
        return _table.read_table(run_dir, columns)
    except (OSError, ValueError, ArrowException) as exc:  # sealed yet unreadable: never a traceback
        raise IntegrityError(f"{run_dir / _table.ATTEMPTS_FILE}: cannot read the attempts table: "
                             f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None
