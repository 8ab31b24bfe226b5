"""A shard's columnar sidecar gives exactly what parsing its JSONL gives, and the JSONL wins whenever they differ."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from rushhour.audit.load import PARSE_SCHEMA, RunData, load_run, read_shard
from rushhour.records import columns
from rushhour.records.manifest import write_manifest
from rushhour.records.record import (
    RECORDS_DIR,
    Anchor,
    BreakerRecord,
    EventRecord,
    HealthRecord,
    RequestRecord,
    ShardWriter,
    TaskRecord,
)

S = 1_000_000_000
ANCHOR = Anchor(mono_ns=5_000 * S, wall_ns=1_780_000_000 * S)
ROOT = Path(__file__).resolve().parents[2]


def _run(root: Path, n: int = 3000, batch_rows: int = 500, uncertainty: int = 1200, **writer: object) -> Path:
    """A run folder with one shard of every line kind, its sidecar in batches of ``batch_rows`` rows."""
    run = root / "run"
    write_manifest(run, {"run_id": "r", "scenario": {"name": "x"}, "mono_anchor_ns": ANCHOR.mono_ns,
                         "wall_anchor_ns": ANCHOR.wall_ns})
    w = ShardWriter(run / RECORDS_DIR / "h-1.jsonl", run_id="r", anchor=ANCHOR, flush_lines=97,
                    header={"clock_uncertainty_ns": uncertainty}, **writer)  # type: ignore[arg-type]
    if w.columns is not None:
        w.columns.batch_rows = batch_rows
    w.write(EventRecord("r", w.next_seq(), 0, "worker_start", {"pid": 1}))
    for i in range(n):
        ok = i % 5 != 0
        w.write(RequestRecord(
            "r", w.next_seq(), f"req-{i}", f"req-{i - 1 if i % 11 == 0 and i else i}", ["gold", "silver"][i % 2],
            f"t{i % 3}", "chat", task_id=f"task{i // 4}" if i % 3 == 0 else "", attempt=2 if i % 11 == 0 else 1,
            retry_reason="429" if i % 11 == 0 else None, status=200 if ok else 429,
            reason=None if ok else "rejected-saturated", error=None if ok else "queue at capacity «é»",
            intended_ns=i * S // 10, sent_ns=i * S // 10 + 7, first_token_ns=i * S // 10 + 9 if ok else None,
            done_ns=i * S // 10 + 20, complete=ok, tokens=12 if ok else 0, retry_after_s=1 if not ok else None,
            prompt_tokens=100 + i, output_tokens=12 if ok else None, route="primary" if i % 7 else "fallback"))
        if i % 400 == 0:
            w.write(HealthRecord("r", w.next_seq(), i * S // 10, 2_000_000, float("nan") if i == 800 else 33.5,
                                 in_flight=i % 9))
            w.write(TaskRecord("r", w.next_seq(), f"task{i // 4}", "chat", "gold", "t1", start_ns=i, end_ns=i + 5,
                               outcome="completed", steps=2, calls=2))
            w.write(BreakerRecord("r", w.next_seq(), i, "primary", "open", "closed", cause="5xx"))
    w.write(EventRecord("r", w.next_seq(), n, "worker_stop", {"reason": "completed", "x": float("inf")}))
    w.close()
    return run


def _shard(run: Path) -> Path:
    return run / RECORDS_DIR / "h-1.jsonl"


def _assert_same(a: RunData, b: RunData) -> None:
    for name in ("requests", "tasks", "health", "breakers"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_categorical=True)
    assert a.events == b.events
    assert (a.skipped_lines, a.truncated_shards, a.processes, a.lost_workers, a.shard_bytes) == (
        b.skipped_lines, b.truncated_shards, b.processes, b.lost_workers, b.shard_bytes)
    assert a.clock == b.clock


def _both(run: Path) -> tuple[RunData, RunData]:
    fast, slow = load_run(run), load_run(run, columnar=False)
    assert slow.columnar_bytes == 0
    _assert_same(fast, slow)
    return fast, slow


def test_the_sidecar_holds_what_the_parser_reads(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert columns.sidecar_path(_shard(run)).stat().st_size > 0
    fast, _ = _both(run)
    assert fast.columnar_bytes == fast.shard_bytes == _shard(run).stat().st_size  # all of it, nothing parsed
    assert len(fast.requests) == 3000 and len(fast.health) == 8 and len(fast.events) == 2


def test_a_writer_without_columns_writes_no_sidecar(tmp_path: Path) -> None:
    run = _run(tmp_path, n=50, columns=False)
    assert not columns.sidecar_path(_shard(run)).exists()
    fast, _ = _both(run)
    assert fast.columnar_bytes == 0


def test_an_edited_shard_is_parsed_from_the_batch_that_no_longer_matches(tmp_path: Path) -> None:
    run = _run(tmp_path)
    shard = _shard(run)
    data = shard.read_bytes()
    at = data.index(b'"status":200', len(data) // 2)
    shard.write_bytes(data[:at] + b'"status":201' + data[at + 12:])  # same size, one answer changed
    fast, _ = _both(run)
    assert 0 < fast.columnar_bytes < at < fast.shard_bytes
    assert (fast.requests["status"] == 201).sum() == 1


def test_a_grown_shard_parses_only_its_new_lines(tmp_path: Path) -> None:
    run = _run(tmp_path)
    shard = _shard(run)
    size = shard.stat().st_size
    with shard.open("ab") as fh:
        fh.write(b'{"kind":"event","seq":99999,"ts_ns":5,"name":"late"}\n{"kind":"request","seq":')  # + a cut line
    fast, _ = _both(run)
    assert fast.columnar_bytes == size and fast.truncated_shards == 1 and fast.events[-1]["name"] == "late"


def _message_ends(side: Path) -> list[int]:
    """Where each message of a sidecar ends (its batches, then the seal)."""
    source = pa.BufferReader(side.read_bytes())
    reader = pa.ipc.open_stream(source)
    ends = []
    with contextlib.suppress(StopIteration):
        while True:
            reader.read_next_batch_with_custom_metadata()
            ends.append(source.tell())
    return ends


@pytest.mark.parametrize("cut", [1, 100, 5000, -1])
def test_a_cut_sidecar_gives_its_whole_batches_only(tmp_path: Path, cut: int) -> None:
    """A killed writer leaves a batch half written: the batches before it are used, the rest parsed."""
    run = _run(tmp_path)
    side = columns.sidecar_path(_shard(run))
    data = side.read_bytes()
    last_batch_end = _message_ends(side)[-2]  # the seal follows the last batch
    side.write_bytes(data[: cut if cut > 0 else last_batch_end - 10])
    fast, _ = _both(run)
    assert fast.columnar_bytes < fast.shard_bytes


def test_a_cut_seal_leaves_every_batch_checked_and_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    side = columns.sidecar_path(_shard(run))
    side.write_bytes(side.read_bytes()[: _message_ends(side)[-2] + 7])  # the seal cut after its first bytes
    checked = _count_checks(monkeypatch)
    fast, _ = _both(run)
    assert fast.columnar_bytes == fast.shard_bytes and checked[0] == 6  # 3,000 + 26 lines: six batches of 500


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the batches checked byte by byte against the shard."""
    checked = [0]
    real = columns._matches

    def counting(*args: object) -> bool:
        checked[0] += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(columns, "_matches", counting)
    return checked


def test_a_sealed_shard_as_written_is_read_without_its_jsonl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    ends = _message_ends(columns.sidecar_path(_shard(run)))
    assert len(ends) == 7  # six batches and the seal
    checked = _count_checks(monkeypatch)
    fast, _ = _both(run)
    assert fast.columnar_bytes == fast.shard_bytes and checked[0] == 0


def test_the_seal_is_written_once_the_file_clock_has_moved_on(tmp_path: Path) -> None:
    """A write after the close gets a later mtime than the sealed one, even in the close's clock tick."""
    run = _run(tmp_path, n=20)
    source = pa.BufferReader(columns.sidecar_path(_shard(run)).read_bytes())
    reader = pa.ipc.open_stream(source)
    metas = []
    with contextlib.suppress(StopIteration):
        while True:
            metas.append(reader.read_next_batch_with_custom_metadata()[1])
    seal = json.loads(metas[-1][b"seal"])
    assert seal == columns.file_print(_shard(run))
    assert columns._file_clock_ns() > seal["mtime_ns"]
    with _shard(run).open("r+b") as fh:  # rewrite one byte with itself: same bytes, a new mtime
        fh.write(fh.read(1))
        fh.seek(0)
    assert _shard(run).stat().st_mtime_ns > seal["mtime_ns"]


def test_a_shard_written_after_its_seal_is_checked_batch_by_batch(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    shard = _shard(run)
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 1))  # touched: same bytes
    checked = _count_checks(monkeypatch)
    fast, _ = _both(run)
    assert fast.columnar_bytes == fast.shard_bytes and checked[0] == 6


def test_a_tail_edit_with_its_mtime_set_back_is_still_caught(tmp_path: Path) -> None:
    """The seal hashes the shard's last 64 KiB: an edit there is seen even with the old mtime restored."""
    run = _run(tmp_path)
    shard = _shard(run)
    st = shard.stat()
    data = shard.read_bytes()
    at = data.rindex(b'"status":200')
    assert at > len(data) - columns.TAIL_BYTES
    shard.write_bytes(data[:at] + b'"status":201' + data[at + 12:])
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    fast, _ = _both(run)
    assert fast.columnar_bytes < at and (fast.requests["status"] == 201).sum() == 1


def test_a_sidecar_of_another_shard_is_not_used(tmp_path: Path) -> None:
    run = _run(tmp_path)
    other = _run(tmp_path / "other", uncertainty=1300)  # the same records, another header line
    columns.sidecar_path(_shard(run)).write_bytes(columns.sidecar_path(_shard(other)).read_bytes())
    fast, _ = _both(run)
    assert fast.columnar_bytes == 0


def test_a_forged_batch_with_a_wrong_checksum_is_not_used(tmp_path: Path) -> None:
    """A sidecar written by hand with other rows for the same byte spans: its checksum gives it away."""
    run = _run(tmp_path, n=40)
    shard = _shard(run)
    size = shard.stat().st_size
    side = columns.sidecar_path(shard)
    real = pa.ipc.open_stream(side.read_bytes()).read_all()
    forged = real.set_column(real.schema.get_field_index("status"), "status", pa.array([500] * len(real)))
    with side.open("wb") as fh, pa.ipc.new_stream(fh, real.schema) as out:
        out.write_batch(forged.combine_chunks().to_batches()[0],
                        custom_metadata={"start": "0", "end": str(size), "rows": str(len(real)), "crc32": "12345"})
    fast, _ = _both(run)
    assert fast.columnar_bytes == 0 and (fast.requests["status"] != 500).all()


def test_a_sidecar_of_another_version_or_type_is_not_used(tmp_path: Path) -> None:
    run = _run(tmp_path, n=40)
    side = columns.sidecar_path(_shard(run))
    table = pa.ipc.open_stream(side.read_bytes()).read_all()
    for schema in (table.schema.with_metadata({"rushhour.sidecar": "0"}),
                   table.schema.set(table.schema.get_field_index("status"), pa.field("status", pa.float64()))):
        with side.open("wb") as fh, pa.ipc.new_stream(fh, schema) as out:
            out.write_batch(pa.RecordBatch.from_arrays([pa.nulls(1, t) for t in schema.types], schema=schema),
                            custom_metadata={"start": "0", "end": "10", "rows": "1", "crc32": "0"})
        fast, _ = _both(run)
        assert fast.columnar_bytes == 0


def test_a_value_the_parser_refuses_ends_the_sidecar_there(tmp_path: Path) -> None:
    """A float in an integer field: the parser skips the line, so the sidecar must not hold it (nor what follows)."""
    run = tmp_path / "run"
    write_manifest(run, {"run_id": "r", "scenario": {"name": "x"}, "mono_anchor_ns": ANCHOR.mono_ns})
    w = ShardWriter(run / RECORDS_DIR / "h-1.jsonl", run_id="r", anchor=ANCHOR, flush_lines=1)
    assert w.columns is not None
    w.columns.batch_rows = 3
    for i in range(20):
        bad = i == 10
        w.write(RequestRecord("r", w.next_seq(), f"q{i}", f"q{i}", "gold", "t", "chat", status=200,
                              sent_ns=1.5 if bad else i, tokens=True if i == 14 else 3))  # type: ignore[arg-type]
    w.close()
    assert w.columns.stopped
    fast, _ = _both(run)
    assert 0 < fast.columnar_bytes < fast.shard_bytes and fast.skipped_lines == 2 and len(fast.requests) == 18


def test_appending_to_an_older_shard_keeps_no_sidecar(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"kind":"event","ts_ns":1,"name":"before"}\n')
    w = ShardWriter(path, run_id="r", anchor=ANCHOR)
    assert w.columns is None
    w.close()
    assert not columns.sidecar_path(path).exists()


def test_kind_tables_equal_chunk_by_chunk(tmp_path: Path) -> None:
    """The shard reader's per-kind tables (before any frame) are the parser's, row for row."""
    run = _run(tmp_path, n=700, batch_rows=64)
    a, b = read_shard(_shard(run)), read_shard(_shard(run), columnar=False)
    assert a.columnar_bytes == a.body_bytes and b.columnar_bytes == 0
    for kind in a.per_kind:
        rows = [pa.concat_tables(p.per_kind[kind]).to_pylist() if p.per_kind[kind] else [] for p in (a, b)]
        assert rows[0] == rows[1], kind
    assert pa.concat_tables(a.headers).to_pylist() == pa.concat_tables(b.headers).to_pylist()
    assert set(PARSE_SCHEMA.names) <= set(columns.UNION_SCHEMA.names)


WRITER = """
import sys, time
from pathlib import Path
from rushhour.records.record import Anchor, RequestRecord, ShardWriter
w = ShardWriter(Path(sys.argv[1]), run_id="r", anchor=Anchor(1, 2), flush_lines=7, flush_interval_s=0.001)
w.columns.batch_rows = 50
i = 0
while True:
    i += 1
    w.write(RequestRecord("r", w.next_seq(), f"q{i}", f"q{i}", "gold", "t", "chat", status=200, sent_ns=i,
                          error="x" * (i % 300)))
    if i == 3000:
        print("ready", flush=True)
"""


def test_a_writer_killed_mid_run_leaves_a_shard_the_audit_reads_alike(tmp_path: Path) -> None:
    """kill -9 of a real writing process: whatever the cut, the sidecar's prefix and the JSONL agree."""
    run = tmp_path / "run"
    write_manifest(run, {"run_id": "r", "scenario": {"name": "x"}, "mono_anchor_ns": 1})
    shard = run / RECORDS_DIR / "h-1.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(shard)], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    fast, _ = _both(run)
    assert len(fast.requests) >= 3000 and 0 < fast.columnar_bytes <= fast.shard_bytes


def _drop_column(side: Path, name: str, not_kept: bool) -> None:
    """Rewrite a sidecar as a writer that did not type ``name`` would have (its lines holding it or not)."""
    reader = pa.ipc.open_stream(side.read_bytes())
    batches = []
    while True:
        try:
            batches.append(reader.read_next_batch_with_custom_metadata())
        except StopIteration:
            break
    schema = reader.schema.remove(reader.schema.get_field_index(name))
    with side.open("wb") as fh, pa.ipc.new_stream(fh, schema) as out:
        for batch, meta in batches:
            kept = {k.decode(): v.decode() for k, v in meta.items()}
            if "seal" in kept:  # the writer's seal: the shard is as it was
                out.write_batch(batch.drop_columns([name]), custom_metadata=kept)
                continue
            others = [n for n in json.loads(kept["not_kept"]) if n != name] + ([name] if not_kept else [])
            kept["not_kept"] = json.dumps(others)
            out.write_batch(batch.drop_columns([name]), custom_metadata=kept)


@pytest.mark.parametrize("lines_had_it", [False, True])
def test_a_sidecar_without_a_field_the_audit_reads(tmp_path: Path, lines_had_it: bool) -> None:
    """An older writer did not type a field the audit now reads: its sidecar holds when its lines had no such
    field (null, as the parser reads them), and is not used when they had it."""
    run = _run(tmp_path, n=300)
    _drop_column(columns.sidecar_path(_shard(run)), "tool_call", lines_had_it)
    fast, _ = _both(run)
    assert fast.columnar_bytes == (0 if lines_had_it else fast.shard_bytes)


def test_the_writer_names_the_fields_it_does_not_keep(tmp_path: Path) -> None:
    run = _run(tmp_path, n=30)
    reader = pa.ipc.open_stream(columns.sidecar_path(_shard(run)).read_bytes())
    _, meta = reader.read_next_batch_with_custom_metadata()
    assert {"run_id", "detail", "key_fingerprint"} <= set(json.loads(meta[b"not_kept"]))
