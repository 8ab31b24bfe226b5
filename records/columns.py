"""A shard's columnar sidecar: its records again as typed Arrow batches, so the audit skips the JSON parse.

The JSONL shard stays the source of truth (append-only, human-readable, safe against a kill -9). Beside
``records/<name>.jsonl`` the writer keeps ``records/<name>.arrows``, an Arrow IPC stream: each batch holds
the rows of one run of whole lines of the shard and says which (byte ``start``/``end`` in the JSONL, row
count, and the CRC-32 of exactly those bytes). The audit takes a batch only when that run of bytes is in
the shard now with that checksum, in order from byte 0; it stops at the first batch that does not match
(or is cut: a killed writer) and parses the JSONL from there. A stale, truncated, foreign or edited
sidecar therefore costs only time, never a different answer.

A writer that closes normally **seals** its sidecar: a last, empty batch holding the shard's print (size,
``mtime_ns`` and the SHA-256 of its last 64 KiB), written once the file system's clock has moved past the
shard's last write, so any later write gives the shard a later ``mtime_ns``. While the shard still has that
print and the batches cover it whole, the audit takes them without reading the JSONL at all (the checksums
are what a 10M-attempt run's 11 GB of JSONL were read for); any other shard is checked batch by batch as
above. The print is what ``make`` and ``rsync`` trust: it misses only a same-size edit away from the tail
whose modification time is then set back by hand (``attempts.parquet``'s staleness check rests on it too).

A row holds what the audit's JSON parser would make of its line: the typed fields below, the rest of a
line (free objects such as an event's ``detail``) left out. A value the parser would reject (a float in
an integer field, text in a number field …) ends the sidecar there, so the JSONL is parsed for the rest.
(NaN and ±Infinity, which Python writes, are read by the parser as floats, and kept so here.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from rushhour.records.schema import KIND_BREAKER, KIND_EVENT, KIND_HEALTH, KIND_REQUEST, KIND_SHARD, KIND_TASK
from rushhour.stacks.timing import FIELDS as TIMING_FIELDS

SUFFIX = ".arrows"  # the IPC stream format's usual extension; never matched by the shards' *.jsonl
VERSION = "1"  # bump when a row would no longer equal what the parser makes of its line
BATCH_ROWS = 4096  # rows per batch: converting one blocks the writer's loop for a few ms at most
TAIL_BYTES = 64 << 10  # the tail of a file that its print hashes
SEAL_WAIT_S = 0.05  # the longest a closing writer waits for the file system's clock to tick (it ticks every ≤ 10 ms)

_I = pa.int64()
_F = pa.float64()
_S = pa.string()
_B = pa.bool_()

# Every typed field of every line kind. Fields that hold free objects (event ``detail``, ``token_ns``)
# are left out: the bulk parser ignores them, so one odd value cannot fail a whole block.
REQUEST_FIELDS: dict[str, pa.DataType] = {
    "seq": _I, "request_id": _S, "logical_id": _S, "tier": _S, "tenant": _S, "persona": _S,
    "session_id": _S, "task_id": _S, "step": _I, "fanout_index": _I, "attempt": _I, "retry_reason": _S,
    "route": _S, "endpoint": _S, "model": _S, "dialect": _S, "stream": _B, "prompt_bytes": _I,
    "intended_ns": _I, "sent_ns": _I, "headers_ns": _I, "first_token_ns": _I, "last_token_ns": _I,
    "done_ns": _I, "tokens": _I, "itl_max_ns": _I, "itl_mean_ns": _I, "status": _I, "reason": _S,
    "error": _S, "in_band_error": _S, "complete": _B, "cancelled": _B, "not_sent": _B,
    "client_timeout": _B, "transport_error": _B, "retry_after_s": _F, "prompt_tokens": _I,
    "output_tokens": _I, "cached_tokens": _I, "service_tier": _S, "reconnected": _B,
    "prompt_tokens_intended": _I, "prompt_tokens_exact": _B, "max_tokens": _I, "output_pinned": _B, "abandoned": _B,
    "twin_of": _S, "control": _B, "parent_id": _S, "tool_call": _S, "tools_offered": _B,
    "first_token_clock": _S, "first_token_read_ns": _I, "first_token_batch": _I,
    **dict.fromkeys(TIMING_FIELDS, _F),
}
TASK_FIELDS: dict[str, pa.DataType] = {
    "seq": _I, "task_id": _S, "persona": _S, "tier": _S, "tenant": _S, "session_id": _S, "start_ns": _I,
    "deadline_ns": _I, "end_ns": _I, "outcome": _S, "steps": _I, "calls": _I, "calls_failed": _I,
    "first_failure": _S, "ideal_ns": _I,
}
HEALTH_FIELDS: dict[str, pa.DataType] = {
    "ts_ns": _I, "loop_lag_ns": _I, "cpu_percent": _F, "in_flight": _I, "not_sent_total": _I,
    "sent_total": _I, "pid": _I, "worker_index": _I, "workers": _I, "load1": _F, "cpus": _I,
}
BREAKER_FIELDS: dict[str, pa.DataType] = {
    "ts_ns": _I, "route": _S, "state": _S, "previous": _S, "cause": _S,
}
EVENT_FIELDS: dict[str, pa.DataType] = {"ts_ns": _I, "name": _S}
SHARD_FIELDS: dict[str, pa.DataType] = {"host": _S, "pid": _I, "mono_anchor_ns": _I, "wall_anchor_ns": _I,
                                        "clock_offset_ns": _I, "clock_uncertainty_ns": _I}

KIND_FIELDS: dict[str, dict[str, pa.DataType]] = {
    KIND_REQUEST: REQUEST_FIELDS,
    KIND_TASK: TASK_FIELDS,
    KIND_HEALTH: HEALTH_FIELDS,
    KIND_BREAKER: BREAKER_FIELDS,
    KIND_EVENT: EVENT_FIELDS,
}


def _union_schema() -> pa.Schema:
    fields: dict[str, pa.DataType] = {"kind": _S, "schema": _I}
    for table in (*KIND_FIELDS.values(), SHARD_FIELDS):
        for name, dtype in table.items():
            fields.setdefault(name, dtype)
    return pa.schema(list(fields.items()))


UNION_SCHEMA = _union_schema()
_TYPES = dict(zip(UNION_SCHEMA.names, UNION_SCHEMA.types, strict=True))
# a kind's own fields, in its rows' order: one C call gathers a row (itemgetter), the rest are nulls
_OWN = {kind: ("kind", "schema", *fields) for kind, fields in KIND_FIELDS.items()}
_OWN[KIND_SHARD] = ("kind", "schema", *SHARD_FIELDS)
_GET = {kind: itemgetter(*names) for kind, names in _OWN.items()}


def sidecar_path(shard: Path) -> Path:
    """``records/<name>.jsonl`` → ``records/<name>.arrows``."""
    return Path(shard).with_suffix(SUFFIX)


def file_print(path: Path) -> dict[str, Any]:
    """What tells a file's version apart without reading it whole: name, size, ``mtime_ns``, its tail's SHA-256.

    Shards only grow, so an append changes size and tail; any write changes ``mtime_ns``.
    """
    st = path.stat()
    with path.open("rb") as handle:
        if st.st_size > TAIL_BYTES:
            handle.seek(st.st_size - TAIL_BYTES)
        tail = handle.read(TAIL_BYTES)
    return {"name": path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "tail_sha256": hashlib.sha256(tail).hexdigest()}


def _file_clock_ns() -> int:
    """The clock the kernel stamps ``mtime`` with (the coarse real-time clock on Linux)."""
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", None)
    return time.clock_gettime_ns(coarse) if coarse is not None else time.time_ns()


def _clock_past(mtime_ns: int) -> bool:
    """Wait until a write now would get a later ``mtime_ns`` than ``mtime_ns``; False if the clock did not move."""
    deadline = time.monotonic() + SEAL_WAIT_S
    while _file_clock_ns() <= mtime_ns:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _column(values: Any, dtype: pa.DataType) -> pa.Array:
    """``values`` as an array of ``dtype``, or an error where the JSON parser would refuse the line.

    The types are inferred first, not forced: a forced conversion would truncate a float into an integer
    field or read ``true`` as 1.0, where the parser refuses the line.
    """
    array = pa.array(values, from_pandas=False)
    if array.type == dtype:
        return array
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), dtype)
    if dtype == _F and pa.types.is_integer(array.type):  # JSON's 1 in a float field: the parser reads 1.0
        return pc.cast(array, _F, safe=False)
    raise TypeError(f"{array.type} where the parser wants {dtype}")


def rows_batch(rows: list[dict[str, Any]]) -> tuple[pa.RecordBatch, list[str]]:
    """The rows (one dict per line, as written) as one batch of the union schema, grouped by kind, and the
    names of the lines' fields it does not keep (``detail``, ``token_ns`` …).

    Rows of one kind keep their order; kinds are grouped (the audit splits a batch by kind anyway).
    Raises when a value is not what the parser would accept for its field. The names not kept let a later
    audit that reads a field this writer did not type know the lines lacked it (null), not guess.
    """
    seen: set[str] = set()
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_kind.setdefault(row.get("kind"), []).append(row)  # type: ignore[arg-type]
    parts: list[pa.RecordBatch] = []
    for kind, group in by_kind.items():
        names = _OWN.get(kind)
        if names is None:
            raise ValueError(f"unknown line kind {kind!r}")
        try:
            values: list[Any] = list(zip(*map(_GET[kind], group), strict=True))
        except KeyError:  # a row without one of its kind's fields (a header's optional ones): absent = null
            values = [[row.get(name) for row in group] for name in names]
        own = dict(zip(names, values, strict=True))
        n = len(group)
        first = len(group[0])
        seen.update(group[0])
        for row in group:  # rows of one record class have one key set; token_ns comes and goes
            if len(row) != first:
                seen.update(row)
        arrays = [_column(own[name], dtype) if name in own else pa.nulls(n, dtype) for name, dtype in _TYPES.items()]
        parts.append(pa.RecordBatch.from_arrays(arrays, schema=UNION_SCHEMA))
    batch = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
    return batch, sorted(seen - set(_TYPES))


class SidecarWriter:
    """Appends batches to a shard's sidecar as the shard's lines reach the kernel (driven by the shard writer).

    ``add`` is told the rows and bytes of each flushed run of lines, in order; every ``batch_rows`` rows
    (and at ``close``) they become one batch. Any failure stops the sidecar for good: what it holds stays a
    valid prefix, and the audit parses the JSONL from its end.
    """

    def __init__(self, shard: Path, *, batch_rows: int = BATCH_ROWS) -> None:
        self.shard = Path(shard)
        self.path = sidecar_path(shard)
        self.batch_rows = batch_rows
        self.stopped = False
        self.batches = 0
        self._rows: list[dict[str, Any]] = []
        self._start = self._end = 0  # the JSONL bytes of the pending rows
        self._crc = 0
        self._sink: BinaryIO | None = None
        self._stream: pa.ipc.RecordBatchStreamWriter | None = None
        # pyarrow's first conversion imports pandas (≈ 0.5 s, ≈ 55 MB): paid here, before the run's clock, not
        # as a stall of the writer's loop at its first batch
        pa.array([0])
        try:
            self._sink = self.path.open("wb")
            meta = {"rushhour.sidecar": VERSION, "rushhour.shard": Path(shard).name}
            self._stream = pa.ipc.new_stream(self._sink, UNION_SCHEMA.with_metadata(meta))
            self._sink.flush()
        except (OSError, pa.ArrowException):
            self.stop()

    def add(self, rows: list[dict[str, Any]], blob: bytes) -> None:
        """``rows`` were written as ``blob`` (their whole lines), right after the bytes already added."""
        if self.stopped:
            return
        self._rows.extend(rows)
        self._crc = zlib.crc32(blob, self._crc)
        self._end += len(blob)
        if len(self._rows) >= self.batch_rows:
            self._emit()

    def _emit(self) -> None:
        if not self._rows or self._stream is None or self._sink is None:
            return
        try:
            batch, others = rows_batch(self._rows)
            meta = {"start": str(self._start), "end": str(self._end), "rows": str(len(self._rows)),
                    "crc32": str(self._crc), "not_kept": json.dumps(others)}
            self._stream.write_batch(batch, custom_metadata=meta)
            self._sink.flush()  # whole batches reach the kernel: a kill -9 cuts at most the one being written
        except Exception:  # any value the parser would refuse, a full disk …: stop, keep the prefix
            self.stop()
            return
        self.batches += 1
        self._rows = []
        self._start = self._end
        self._crc = 0

    def stop(self) -> None:
        """Write nothing more (the batches written stay a valid prefix)."""
        self.stopped = True
        self._rows = []
        self._close_files()

    def close(self) -> None:
        """Write the pending rows as a last batch, seal the sidecar (the shard is whole) and close the stream.

        Called once the shard's last line is written: its print is final then.
        """
        if not self.stopped:
            self._emit()
        if not self.stopped:
            self._seal()
        self.stopped = True
        self._close_files()

    def _seal(self) -> None:
        """The shard's print as a last, empty batch, when the batches cover every byte of the shard."""
        if self._stream is None or self._sink is None:
            return
        try:
            mtime_ns = self.shard.stat().st_mtime_ns
            if not _clock_past(mtime_ns):  # a write in this tick would keep the print: no seal, checksums then
                return
            shard = file_print(self.shard)
            if shard["size"] != self._end or shard["mtime_ns"] != mtime_ns:  # lines we were not told of
                return
            empty = pa.RecordBatch.from_arrays([pa.nulls(0, t) for t in UNION_SCHEMA.types], schema=UNION_SCHEMA)
            self._stream.write_batch(empty, custom_metadata={"seal": json.dumps(shard), "end": str(self._end)})
            self._sink.flush()
        except Exception:  # no seal: the batches stand, checked by their checksums
            return

    def _close_files(self) -> None:
        stream, sink = self._stream, self._sink
        self._stream = self._sink = None
        try:
            if stream is not None:
                stream.close()
        except (OSError, pa.ArrowException):
            pass
        try:
            if sink is not None:
                sink.close()
        except OSError:
            pass


# --------------------------------------------------------------------------- reader


@dataclass
class _Chain:
    """The batches that chain from byte 0 of a shard, as a sidecar holds them."""

    batches: list[pa.RecordBatch] = field(default_factory=list)  # their columns: zero-copy views of the sidecar
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, CRC-32) in the shard
    ends: list[int] = field(default_factory=list)  # where each ends in the sidecar
    seal: dict[str, Any] | None = None  # the shard's print at the writer's close, after the last batch


def _batches(source: Any, names: list[str], types: list[pa.DataType], limit: int) -> _Chain:
    """The batches that chain from byte 0 within the shard's first ``limit`` bytes (``names``' columns),
    and the seal that follows the last of them, if the writer wrote one."""
    chain = _Chain()
    out, spans, ends = chain.batches, chain.spans, chain.ends
    try:
        reader = pa.ipc.open_stream(source)
    except (OSError, pa.ArrowException):
        return chain
    schema = reader.schema
    if (schema.metadata or {}).get(b"rushhour.sidecar") != VERSION.encode():
        return chain
    absent: list[str] = []  # fields this writer did not type: usable where its lines had none of them
    for name, dtype in zip(names, types, strict=True):  # the parser's fields, typed alike, else not ours
        index = schema.get_field_index(name)
        if index < 0:
            absent.append(name)
        elif schema.field(index).type != dtype:
            return chain
    target = pa.schema(list(zip(names, types, strict=True)))
    pos = 0
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        except (OSError, pa.ArrowException):  # a batch cut by a killed writer: the prefix before it stands
            break
        if meta is None:  # not a batch of ours
            break
        if b"seal" in meta:  # the writer's close: nothing follows it
            with contextlib.suppress(KeyError, TypeError, ValueError):
                seal = json.loads(meta[b"seal"])
                if int(meta[b"end"]) == pos and isinstance(seal, dict):
                    chain.seal = seal
            break
        try:
            start, end, rows, crc = (int(meta[key]) for key in (b"start", b"end", b"rows", b"crc32"))
        except (KeyError, TypeError, ValueError):
            break
        if start != pos or not start < end <= limit or rows != batch.num_rows:
            break
        if absent:
            try:
                not_kept = json.loads(meta[b"not_kept"])
            except (KeyError, ValueError):
                break
            if not isinstance(not_kept, list) or set(absent) & set(not_kept):
                break  # the lines had such a field, the sidecar did not keep it: parse them
            columns = [batch.column(name) if name not in absent else pa.nulls(batch.num_rows, dtype)
                       for name, dtype in zip(names, types, strict=True)]
            out.append(pa.RecordBatch.from_arrays(columns, schema=target))
        else:
            out.append(batch.select(names))
        spans.append((start, end, crc))
        ends.append(source.tell())
        pos = end
    return chain


def _sealed(shard: Path, seal: dict[str, Any] | None, body: int) -> bool:
    """The shard still has the print its writer sealed, and ends there on a whole line."""
    if seal is None:
        return False
    try:
        now = file_print(shard)
    except OSError:
        return False
    return now["size"] == body and all(now[key] == seal.get(key) for key in ("name", "size", "mtime_ns", "tail_sha256"))


def _matches(data: Any, view: memoryview, span: tuple[int, int, int]) -> bool:
    start, end, crc = span
    # on a line end, and the same bytes as written (zlib lets go of the GIL: spans check on the other core)
    ok = view[end - 1] == 10 and zlib.crc32(view[start:end]) == crc
    if isinstance(data, mmap.mmap):  # read once: its pages need not stay resident (the kernel keeps them cached)
        first = start - start % mmap.PAGESIZE
        data.madvise(mmap.MADV_DONTNEED, first, end - first)
    return ok


def verified_batches(shard: Path, data: Any, body: int, schema: pa.Schema) -> Iterator[tuple[pa.RecordBatch, int]]:
    """The sidecar's batches (``schema``'s columns) that match the shard's bytes ``data``, each with the
    shard byte where it ends, in order.

    ``body``: where the shard's complete lines end. Each batch must start where the previous ended (the
    first at 0), end on a line end within ``body``, and its span's CRC-32 must equal the one written.
    The first batch that fails ends the iteration: the caller parses the JSONL from the last end yielded.
    A batch is yielded only once checked; the checks run ahead on a second core while the caller works.
    A sealed sidecar whose shard still has the sealed print needs no checks: ``data`` is not read.
    """
    path = sidecar_path(shard)
    if not path.is_file():
        return
    with path.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        source = pa.BufferReader(pa.py_buffer(mapped))  # zero-copy: a batch's pages are read when used
        chain = _batches(source, schema.names, schema.types, body)
        batches, spans, ends = chain.batches, chain.spans, chain.ends
        del source
        # the shard as its writer sealed it, covered whole by the batches: nothing to check byte by byte
        sealed = bool(spans) and spans[-1][1] == body and _sealed(shard, chain.seal, body)
        with memoryview(data) as view, ThreadPoolExecutor(max_workers=2) as pool:
            checks = [] if sealed else [pool.submit(_matches, data, view, span) for span in spans]
            done = 0  # sidecar bytes used and handed back
            for i in range(len(batches)):
                if not sealed and not checks[i].result():
                    break
                yield batches[i], spans[i][1]
                batches[i] = None
                upto = ends[i] - ends[i] % mmap.PAGESIZE
                if upto > done:
                    mapped.madvise(mmap.MADV_DONTNEED, done, upto - done)  # used: its pages need not stay resident
                    done = upto
            for rest in checks:
                rest.cancel()
        del batches
    finally:
        with contextlib.suppress(BufferError):  # a batch still referenced: the GC unmaps it
            mapped.close()
