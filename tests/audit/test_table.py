"""The classified attempts table: its rows and columns, and stale detection by fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import MS, RunBuilder

from rushhour import audit
from rushhour.audit import table

LONG = "vllm says: " + "x" * 280


def _run(root: Path) -> Path:
    b = RunBuilder(root, profile="vllm")
    b.request(tier="interactive", persona="calibration", sent_ns=0)
    b.request(tier="interactive", persona="chat-interactive", sent_ns=10 * MS)
    b.dropped(status=503, error=LONG, tier="interactive", persona="chat-interactive", sent_ns=20 * MS)
    b.request(tier="standard", persona="chat-standard", sent_ns=30 * MS, status=200, complete=False,
              in_band_error="The engine is currently busy and cannot accept new requests")
    return b.close()


def test_rows_classes_flags_and_cut_text(tmp_path: Path) -> None:
    run = _run(tmp_path)
    summary = audit.run_audit(run)
    t = audit.attempts(run)
    assert list(t.columns) == list(table.COLUMNS)
    assert len(t) == 4 and int(t["probe"].sum()) == 1
    assert t["class"].astype(str).tolist() == ["served", "served", "unclassified", "queue_full"]
    assert set(t["profile"].astype(str)) == {"vllm"}
    assert t["in_band"].tolist() == [False, False, False, True]
    assert t["error"].iloc[3].startswith("The engine is currently busy")  # the in-band text is the error
    assert len(t["error"].iloc[2]) == table.ERROR_CUT and t["status"].iloc[2] == 503
    served = t.iloc[1]
    assert served["ttft_ns"] == served["first_token_ns"] - served["sent_ns"]
    assert summary.tier("interactive").by_class["served"] == 1  # the probe is in the table, not in the tier


def test_any_input_or_rule_change_makes_it_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    audit.run_audit(run)
    assert audit.current_summary(run) is not None
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "seed": 4}))
    assert audit.current_summary(run) is None  # run.json changed
    audit.run_audit(run)
    monkeypatch.setattr(table, "classifier_version", lambda: "another-rule-table")
    assert audit.current_summary(run) is None  # a new rule: re-audit
    monkeypatch.undo()
    assert audit.current_summary(run) is not None
    (run / "summary.json").write_text((run / "summary.json").read_text() + " ")
    with pytest.raises(audit.IntegrityError, match=r"summary\.json: changed after the audit"):
        audit.current_summary(run)  # not the summary written with the table: refused, not taken for stale


def test_a_damaged_table_is_refused_by_readers_and_rebuilt_by_the_audit(tmp_path: Path) -> None:
    run = _run(tmp_path)
    audit.run_audit(run)
    (run / table.ATTEMPTS_FILE).write_bytes(b"not parquet")
    assert table.stored_inputs(run) is None
    with pytest.raises(audit.IntegrityError, match=r"attempts\.parquet: changed after the audit"):
        audit.attempts(run)
    audit.run_audit(run)
    assert len(audit.attempts(run)) == 4


def test_rushhour_audit_keeps_a_current_summary_and_force_audits_again(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rushhour.cli import app

    run = _run(tmp_path)
    cli = CliRunner()
    first = cli.invoke(app, ["audit", str(run), "--quiet"])
    assert first.exit_code == 0, first.output
    assert "kept" not in first.output
    stamps = [(run / name).stat().st_mtime_ns for name in ("summary.json", table.ATTEMPTS_FILE)]
    again = cli.invoke(app, ["audit", str(run), "--quiet"])
    assert again.exit_code == 0, again.output
    assert "kept: nothing changed since the last audit" in again.output  # says why nothing was redone
    assert [(run / name).stat().st_mtime_ns for name in ("summary.json", table.ATTEMPTS_FILE)] == stamps
    forced = cli.invoke(app, ["audit", str(run), "--quiet", "--force"])
    assert forced.exit_code == 0, forced.output
    assert "kept" not in forced.output
    assert (run / table.ATTEMPTS_FILE).stat().st_mtime_ns != stamps[1]


def test_a_run_folder_that_cannot_be_written_is_read_in_memory(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """drops.csv and compare still work on a read-only copy of a run: the table is built in memory."""
    import errno

    run = _run(tmp_path)

    def refuse(*_: object, **__: object) -> Path:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(table.TableWriter, "finish", refuse)  # the table's last write: its rows are encoded
    got = audit.attempts(run, columns=["class", "probe"])
    assert list(got.columns) == ["class", "probe"] and len(got) == 4
    assert not (run / table.ATTEMPTS_FILE).exists()
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]  # the half-written table was removed
