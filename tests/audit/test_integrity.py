"""Tamper-evident run folders: integrity.json, readers that refuse an edited table, `rushhour verify`, signing,
and a history that judges the newest run or fails.

Real run folders (real shards written by ShardWriter, audited by the real audit) and the real command line in
a child process: the exit codes and the one-line errors are the user's.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import MS, RunBuilder
from support import rushhour, write_scenario

from rushhour import audit
from rushhour.audit import integrity
from rushhour.verify import Outcome, verify

TIER = [{"name": "interactive", "priority": 100, "slo": {"ttft_ms": {"p50": 5000}}}]
STAMPS = ["20261206T050000Z", "20261206T050100Z", "20261206T050200Z", "20261206T050300Z", "20261206T050400Z"]
# an Ed25519 key pair (PEM), made for these tests only, and another private key (a raw seed)
SECRET = ("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIDQ6kMD9MypB1h5+7vnk9UZWU/CMTilhRicAzn8U0/z9\n"
          "-----END PRIVATE KEY-----\n")
PUBLIC = ("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEATLATvINT+cK0Bs/Hp14r0fUE9tO7gGCFUmkS0iP4Guk=\n"
          "-----END PUBLIC KEY-----\n")
OTHER = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"  # RFC 8032's first test seed


def make_run(root: Path, index: int, factor: float = 1.0, n: int = 240) -> Path:
    """A one-tier run of ``n`` served requests, TTFT 80–120 ms × ``factor``; id and start ``index`` minutes apart."""
    b = RunBuilder(root, run_id=f"{STAMPS[index]}-r{index}", tiers=TIER, duration_s=n * 0.05)
    rng = random.Random(index)
    for i in range(n):
        sent = i * 50 * MS
        ttft = int((80 + 40 * rng.random()) * factor * MS)
        b.request(sent_ns=sent, headers_ns=sent + ttft // 2, first_token_ns=sent + ttft,
                  last_token_ns=sent + ttft + 100 * MS, done_ns=sent + ttft + 100 * MS)
    run = b.close()
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "started_at": f"2026-12-06T05:0{index}:00+00:00"}))
    return run


def edit_times(run: Path, factor: float) -> None:
    """What the adversarial review did: scale the table's times, keep its metadata (the staleness fingerprint)
    and its modification time."""
    path = run / "attempts.parquet"
    before = path.stat()
    meta = pq.read_metadata(path).metadata
    table = pq.read_table(path)
    for name in ("ttft_ns", "e2e_ns"):
        scaled = pc.cast(pc.multiply(pc.cast(table[name], pa.float64()), factor), pa.int64(), safe=False)
        table = table.set_column(table.schema.get_field_index(name), name, scaled)
    writer = pq.ParquetWriter(path, table.schema)
    writer.write_table(table)
    writer.add_key_value_metadata({"rushhour": meta[b"rushhour"].decode()})
    writer.close()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # its time set back, as a careful editor would


def damage(path: Path) -> None:
    """Flip bytes inside the file, footer and metadata kept."""
    data = bytearray(path.read_bytes())
    for i in range(100, min(len(data) // 2, 2000)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def one_error_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2, one error line naming the file, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for word in words:
        assert word in errors[0], errors[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Four runs alike, then a fifth (the newest) 10× slower; audited, with their reports."""
    root = tmp_path_factory.mktemp("runs")
    made = [make_run(root, i, 10.0 if i == 4 else 1.0) for i in range(5)]
    for run in made:
        audit.run_audit(run)
    return made


def copy(runs: list[Path], tmp_path: Path) -> list[Path]:
    import shutil

    return [Path(shutil.copytree(run, tmp_path / run.name)) for run in runs]


def test_the_manifest_names_the_run_its_inputs_and_the_outputs_bound_to_them(runs: list[Path]) -> None:
    manifest = integrity.read_manifest(runs[0])
    assert manifest is not None and manifest.run_id == runs[0].name
    assert {"run.json", "records/host-p1.jsonl", "records/host-p1.arrows"} <= set(manifest.inputs)
    assert set(manifest.outputs) == {"summary.json", "attempts.parquet"}
    assert manifest.outputs["attempts.parquet"] == integrity.hash_file(runs[0] / "attempts.parquet")
    assert audit.table.stored_inputs(runs[0])["inputs_sha256"] == manifest.inputs_sha256  # type: ignore[index]


def test_an_edited_table_is_refused_by_compare_history_and_report_and_named_by_verify(
        runs: list[Path], tmp_path: Path) -> None:
    before = rushhour("compare", str(runs[3]), str(runs[4]), "--fail-on-regression")
    assert before.returncode == 1, before.stdout + before.stderr  # the real regression
    runs = copy(runs, tmp_path)
    edit_times(runs[4], 0.1)  # the newest run's TTFT back to the others'
    table = str(runs[4] / "attempts.parquet")
    one_error_line(rushhour("compare", str(runs[3]), str(runs[4]), "--fail-on-regression"), table, "changed")
    one_error_line(rushhour("history", *map(str, runs), "--out", str(tmp_path / "h"), "--window", "4",
                            "--fail-on-regression"), table)
    one_error_line(rushhour("report", str(runs[4])), table)
    found = rushhour("verify", str(runs[4]))
    assert found.returncode == 1 and "changed  attempts.parquet" in found.stdout, found.stdout + found.stderr
    assert "TAMPERED" in found.stdout
    # `rushhour audit` derives the table again from the records: the regression is back
    again = rushhour("audit", "--quiet", str(runs[4]))
    assert again.returncode == 0 and "auditing again" in again.stderr, again.stderr
    assert rushhour("compare", str(runs[3]), str(runs[4]), "--fail-on-regression").returncode == 1
    assert rushhour("verify", str(runs[4])).returncode == 0


def test_a_damaged_table_is_one_line_exit_2_never_a_traceback(runs: list[Path], tmp_path: Path) -> None:
    runs = copy(runs, tmp_path)
    damage(runs[4] / "attempts.parquet")
    table = str(runs[4] / "attempts.parquet")
    one_error_line(rushhour("report", str(runs[4])), table)
    one_error_line(rushhour("compare", str(runs[3]), str(runs[4])), table)
    one_error_line(rushhour("history", *map(str, runs), "--out", str(tmp_path / "h")), table)
    kept = rushhour("audit", "--quiet", str(runs[4]))  # never kept: audited again
    assert kept.returncode == 0 and "kept" not in kept.stderr, kept.stderr
    assert rushhour("report", str(runs[4])).returncode == 0


def lines(outcome: Outcome) -> list[str]:
    return outcome.lines + ([outcome.error] if outcome.error else [])


def test_verify_names_changed_added_removed_and_rewritten_files(runs: list[Path], tmp_path: Path) -> None:
    (run,) = copy(runs[:1], tmp_path)
    assert rushhour("report", str(run)).returncode == 0
    intact = rushhour("verify", str(run))  # the verb itself, once; then its module
    assert intact.returncode == 0 and intact.stdout.startswith("intact:"), intact.stdout + intact.stderr
    (run / "notes.txt").write_text("mine")
    (run / "report.md").unlink()
    shard = run / "records" / "host-p1.jsonl"
    shard.write_bytes(shard.read_bytes().replace(b'"status":200', b'"status":201', 1))
    found = verify(run)
    assert found.code == 1 and found.lines[-1].startswith("TAMPERED")
    assert {"changed  records/host-p1.jsonl", "added    notes.txt", "removed  report.md"} <= set(found.lines)
    audit.run_audit(run)  # a reader audits the edited records again: that they changed is kept
    assert any(line.startswith("rewritten records/host-p1.jsonl") for line in verify(run).lines)
    assert verify(tmp_path / "nothing").code == 2
    (run / integrity.INTEGRITY_FILE).unlink()
    unsealed = verify(run)
    assert unsealed.code == 2 and "no integrity.json" in (unsealed.error or "")


def test_a_grown_shard_is_no_rewrite(runs: list[Path], tmp_path: Path) -> None:
    (run,) = copy(runs[:1], tmp_path)
    shard = run / "records" / "host-p1.jsonl"
    shard.write_bytes(shard.read_bytes() + shard.read_bytes().splitlines(keepends=True)[-1])
    audit.run_audit(run)
    manifest = integrity.read_manifest(run)
    assert manifest is not None and manifest.rewritten == {}


def test_signature_ok_wrong_key_and_edited_after_signing(runs: list[Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (run,) = copy(runs[:1], tmp_path)
    keys = {"RH_SECRET": SECRET, "RH_PUBLIC": PUBLIC, "RH_OTHER": OTHER}
    signed = rushhour("verify", str(run), "--sign", "env:RH_SECRET", env=keys)
    assert signed.returncode == 0 and "signed:" in signed.stdout, signed.stdout + signed.stderr
    good = rushhour("verify", str(run), "--key", "env:RH_PUBLIC", env=keys)
    assert good.returncode == 0 and "signature good" in good.stdout, good.stdout + good.stderr
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    assert verify(run, key="env:RH_SECRET").code == 0  # the private half checks too
    wrong = verify(run, key="env:RH_OTHER")
    assert wrong.code == 1 and "signed with another key" in wrong.lines[-1]
    for text in (signed.stdout + signed.stderr, good.stdout + good.stderr, *lines(wrong)):
        assert "PRIVATE" not in text and "MC4CAQ" not in text and OTHER not in text  # keys never printed
    sig = (run / integrity.SIGNATURE_FILE).read_text()
    assert "MC4CAQ" not in sig and "PRIVATE" not in sig  # nor written
    edit_times(run, 0.5)  # edited after signing: the files no longer match
    edited = verify(run, key="env:RH_PUBLIC")
    assert edited.code == 1 and "changed  attempts.parquet" in edited.lines
    audit.run_audit(run)  # derived again from the records: the very files signed
    assert verify(run, key="env:RH_PUBLIC").code == 0
    assert rushhour("report", str(run)).returncode == 0  # the manifest names the reports now: not the one signed
    resealed = verify(run, key="env:RH_PUBLIC")
    assert resealed.code == 1 and "integrity.json changed after it was signed" in resealed.lines[-1]
    unset = verify(run, key="env:RH_NOT_SET")
    assert unset.code == 2 and "RH_NOT_SET is not set" in (unset.error or "")
    public_signs = verify(run, sign="env:RH_PUBLIC")
    assert public_signs.code == 2 and "private key" in (public_signs.error or "")
    monkeypatch.setenv("RH_BAD", "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----")
    bad = verify(run, key="env:RH_BAD")
    assert bad.code == 2 and "bm90IGEga2V5" not in (bad.error or "") and "RH_BAD" in (bad.error or "")


def _newest_fails(result: subprocess.CompletedProcess[str], newest: Path, why: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"the newest run by run id ({newest.name[:16]}), {newest}" in result.stdout, result.stdout
    assert why in result.stdout


def test_history_fails_when_the_newest_run_cannot_be_loaded(runs: list[Path], tmp_path: Path) -> None:
    runs = copy(runs, tmp_path)
    # the regressed newest run with an unreadable run.json: the runs before it alone would pass
    (runs[4] / "run.json").write_text('{"run_id": ')
    res = rushhour("history", *map(str, runs), "--out", str(tmp_path / "h"), "--window", "3", "--fail-on-regression")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"the newest run by folder time (20261206T050400Z), {runs[4]}, cannot be loaded" in res.stdout


def test_history_fails_when_the_newest_run_is_back_dated(runs: list[Path], tmp_path: Path) -> None:
    runs = copy(runs, tmp_path)
    manifest = json.loads((runs[4] / "run.json").read_text())
    (runs[4] / "run.json").write_text(json.dumps({**manifest, "started_at": "2026-12-06T04:00:00+00:00"}))
    res = rushhour("history", *map(str, runs), "--out", str(tmp_path / "h"), "--window", "3", "--fail-on-regression")
    _newest_fails(res, runs[4], "is out of order: it started at 2026-12-06T04:00:00+00:00")
    assert json.loads((tmp_path / "h" / "history.json").read_text())["exit_code"] == 2


def test_an_unchanged_input_is_not_hashed_again_and_a_touched_one_is(runs: list[Path], tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (run,) = copy(runs[:1], tmp_path)
    audit.run_audit(run)  # the copy's new inodes and times: hashed once
    hashed: list[str] = []
    real = integrity.hash_file
    monkeypatch.setattr(integrity, "hash_file", lambda path: hashed.append(Path(path).name) or real(path))
    audit.run_audit(run)  # a gate's audit of the unchanged run
    assert not set(hashed) & {"run.json", "host-p1.jsonl", "host-p1.arrows"}, hashed
    os.utime(run / "records" / "host-p1.jsonl")  # same bytes, a new time: hashed again, still no rewrite
    audit.run_audit(run)
    assert "host-p1.jsonl" in hashed and "run.json" not in hashed
    manifest = integrity.read_manifest(run)
    assert manifest is not None and manifest.rewritten == {}
    assert verify(run).code == 0


def test_newest_problems_only_for_a_broken_or_out_of_order_newest() -> None:
    from rushhour.studies.history import FoundRun, newest_problems

    def found(name: str, start: str | None, problem: str | None = None, run_id: str | None = None) -> FoundRun:
        return FoundRun(Path("/runs") / name, run_id or name, start, problem)

    ordered = [found("20261206T050000Z-a", "2026-12-06T05:00:00Z"), found("20261206T050100Z-b", "2026-12-06T05:01:00Z")]
    assert newest_problems(ordered) == []
    assert newest_problems([found("r1", "2026-12-06T05:01:00Z"), found("r2", "2026-12-06T05:00:00Z")]) == []
    broken = newest_problems([*ordered, found("20261206T050200Z-c", None, "run.json is unreadable")])
    assert len(broken) == 2 and all("cannot be loaded: run.json is unreadable" in p for p in broken)
    # back-dated: its start says 04:59, its folder and id 05:02
    late = newest_problems([*ordered, found("20261206T050200Z-c", "2026-12-06T04:59:00Z")])
    assert late and "is out of order" in late[0] and "20261206T050100Z-b started at 2026-12-06T05:01:00Z" in late[0]
    # the folder renamed, the run id kept: still found by its run id
    renamed = newest_problems([*ordered, found("mine", "2026-12-06T04:59:00Z", run_id="20261206T050200Z-c")])
    assert len(renamed) == 1 and renamed[0].startswith("the newest run by run id (20261206T050200Z)")


@pytest.mark.e2e
def test_a_real_run_is_sealed_intact_through_report_and_gate(tmp_path: Path) -> None:
    """`rushhour run` on the testbed: nothing writes into the folder after its seal (logs, ledger, reports)."""
    path = write_scenario(tmp_path, seconds=5)
    res = rushhour("run", str(path), "--out", str(tmp_path / "runs"))
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert res.returncode == 0, res.stdout + res.stderr
    manifest = integrity.read_manifest(run_dir)
    assert manifest is not None and {"report.html", "drops.csv", "attempts.parquet"} <= set(manifest.outputs)
    assert {"run.json", "testbed-ledger.jsonl"} <= set(manifest.inputs)
    intact = rushhour("verify", str(run_dir))
    assert intact.returncode == 0, intact.stdout + intact.stderr
    rushhour("gate", str(run_dir))  # audits again: the same files, still intact
    assert rushhour("verify", str(run_dir)).returncode == 0


def test_a_fifo_in_a_hostile_folder_is_named_never_waited_on(runs: list[Path], tmp_path: Path) -> None:
    (run,) = copy(runs[:1], tmp_path)
    (run / "run.json").unlink()
    os.mkfifo(run / "run.json")  # a reader would block on it forever
    found = verify(run)
    assert found.code == 1 and "changed  run.json" in found.lines
