"""Load every shard of a run into DataFrames, vectorised, tolerant of truncated and malformed lines."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from rushhour.audit.errors import AuditError
from rushhour.audit.memory import lean_allocators, trim
from rushhour.records import columns as sidecar
from rushhour.records.columns import KIND_FIELDS, REQUEST_FIELDS, SHARD_FIELDS, UNION_SCHEMA
from rushhour.records.manifest import RUN_MANIFEST, RunManifest
from rushhour.records.record import (
    KIND_BREAKER,
    KIND_EVENT,
    KIND_HEALTH,
    KIND_REQUEST,
    KIND_SHARD,
    KIND_TASK,
    RECORDS_DIR,
)
from rushhour.stacks.timing import FIELDS as TIMING_FIELDS

# Request columns the audit reads; the rest of a record (endpoint, model, key fingerprint …) is
# parsed for validation but never converted, which keeps a million rows cheap.
REQUEST_USED = (
    "seq", "request_id", "logical_id", "tier", "tenant", "persona", "task_id", "attempt", "retry_reason",
    "route", "intended_ns", "sent_ns", "headers_ns", "first_token_ns", "last_token_ns", "done_ns", "tokens",
    "itl_max_ns", "status", "reason", "error", "in_band_error", "complete", "cancelled", "not_sent",
    "client_timeout", "transport_error", "retry_after_s", "prompt_tokens", "output_tokens", "prompt_bytes",
    "service_tier", "reconnected", "stream",
    "prompt_tokens_intended", "prompt_tokens_exact", "max_tokens", "output_pinned", "abandoned",
    "twin_of", "control", "tools_offered", "tool_call", "parent_id",
    "first_token_clock", "first_token_read_ns", "first_token_batch", "itl_mean_ns",
    *TIMING_FIELDS,
)

# Columns shifted when a shard's anchor differs from the run's (a worker on its own anchor).
TIME_COLUMNS: dict[str, tuple[str, ...]] = {
    KIND_REQUEST: ("intended_ns", "sent_ns", "headers_ns", "first_token_ns", "last_token_ns", "done_ns",
                   "first_token_read_ns"),
    KIND_TASK: ("start_ns", "deadline_ns", "end_ns"),
    KIND_HEALTH: ("ts_ns",),
    KIND_BREAKER: ("ts_ns",),
    KIND_EVENT: ("ts_ns",),
}
# Low-cardinality text: dictionary-encoded, so a million rows cost a few bytes each.
CATEGORICAL = ("tier", "tenant", "persona", "route", "reason", "error", "in_band_error", "retry_reason",
               "endpoint", "model", "dialect", "service_tier", "outcome", "first_failure", "state",
               "previous", "cause", "name", "task_id", "tool_call", "parent_id", "first_token_clock")


# Unique-ish text (ids): kept as arrow strings in the frame.
_ARROW_TEXT = ("request_id", "logical_id", "twin_of")


def _parse_schema() -> pa.Schema:
    """The union schema less the request fields the audit never reads: a field left out is skipped by the
    parser, not converted (a fifth of the parse time of a request line), and its value cannot fail a line."""
    unused = set(REQUEST_FIELDS) - set(REQUEST_USED)
    for table in (*(t for k, t in KIND_FIELDS.items() if k != KIND_REQUEST), SHARD_FIELDS):
        unused -= set(table)
    return pa.schema([f for f in UNION_SCHEMA if f.name not in unused])


PARSE_SCHEMA = _parse_schema()
_CHUNK_LINES = 50_000  # bisection unit after a failed parse: a bad line costs little re-parsing
_BLOCK_BYTES = 4 << 20  # pyarrow block: the unit of parallel parsing
CHUNK_BYTES = 64 << 20
# Sidecar batches split by kind together: 16 of 4,096 rows per call halve the calls' cost (each split is ~14
# arrow calls per kind whatever its size; 64 at once was slower again: bigger filters' scratch).
SIDECAR_GROUP = 16
_PARSING = threading.Lock()  # a shard is parsed this much at a time: memory follows the rows kept, not the file
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)
_BLANK = np.frombuffer(b" \t\n\r\x0b\x0c", dtype=np.uint8)  # what bytes.strip() removes


@dataclass
class ClockAlignment:
    """How the shards were put on one clock: other hosts' shards by the wall clock, with an uncertainty."""

    remote_shards: list[str] = field(default_factory=list)  # written on another host than the anchor's
    uncertainty_ns: int | None = 0  # None: a remote shard without a measured offset (NTP quality only)

    def note(self, name: str, uncertainty_ns: object) -> None:
        self.remote_shards.append(name)
        if not isinstance(uncertainty_ns, int):
            self.uncertainty_ns = None
        elif self.uncertainty_ns is not None:
            self.uncertainty_ns = max(self.uncertainty_ns, uncertainty_ns)


@dataclass
class RunData:
    """Everything the audit reads from a run folder."""

    run_dir: Path
    manifest: RunManifest
    requests: pd.DataFrame
    tasks: pd.DataFrame
    health: pd.DataFrame
    breakers: pd.DataFrame
    events: list[dict[str, Any]] = field(default_factory=list)
    shards: int = 0
    skipped_lines: int = 0
    truncated_shards: int = 0
    processes: int = 0
    lost_workers: list[str] = field(default_factory=list)  # shards with a worker_start and no worker_stop
    clock: ClockAlignment = field(default_factory=lambda: ClockAlignment())
    shard_bytes: int = 0  # complete lines in the shards
    columnar_bytes: int = 0  # of them, read from verified sidecars instead of parsed

    @property
    def mono_anchor_ns(self) -> int | None:
        return self.manifest.mono_anchor_ns


@dataclass
class ParsedBytes:
    """The rows parsed from a byte string of JSON lines, and how many lines were rejected."""

    table: pa.Table | None
    skipped: int


def _parse(data: pa.Buffer, schema: pa.Schema | None, extra: str = "ignore") -> pa.Table:
    options = pj.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior=extra if schema is not None else "infer"
    )
    # Typed: 4 MiB blocks parse on every core. Inferred: one block, so inference sees every line.
    block = _BLOCK_BYTES if schema is not None and extra == "ignore" else max(1 << 20, data.size + 1)
    read = pj.ReadOptions(block_size=block, use_threads=True)
    return pj.read_json(pa.BufferReader(data), parse_options=options, read_options=read)


def parse_jsonl(data: bytes | pa.Buffer, schema: pa.Schema | None = None, extra: str = "ignore") -> ParsedBytes:
    """Parse complete JSON lines; a bad line is isolated by bisection and counted, never fatal.

    The bulk goes through pyarrow in one call (zero-copy, multi-threaded); only when that fails is
    the text split by lines and bisected, so a handful of malformed lines costs a few re-parses of
    the chunks around them rather than a Python loop over every line.
    """
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    if not buf.size or (buf.size < 4096 and not buf.to_pybytes().strip()):  # never copy a big shard to look at it
        return ParsedBytes(None, 0)
    try:
        return ParsedBytes(_parse(buf, schema, extra), 0)
    except _ARROW_ERRORS:
        pass
    view = np.frombuffer(buf, dtype=np.uint8)
    ends = np.flatnonzero(view == 10) + 1  # exclusive end of each line
    if len(ends) == 0 or ends[-1] != len(view):
        ends = np.append(ends, len(view))
    starts = np.concatenate(([0], ends[:-1]))
    tables: list[pa.Table] = []
    skipped = 0

    def span(lo: int, hi: int) -> None:
        nonlocal skipped
        a, b = int(starts[lo]), int(ends[hi - 1])
        if not np.isin(view[a:b], _BLANK, invert=True).any():
            return
        try:
            tables.append(_parse(buf.slice(a, b - a), schema, extra))
            return
        except _ARROW_ERRORS:
            if hi - lo == 1:
                skipped += 1
                return
        mid = (lo + hi) // 2
        span(lo, mid)
        span(mid, hi)

    for lo in range(0, len(starts), _CHUNK_LINES):
        span(lo, min(lo + _CHUNK_LINES, len(starts)))
    if not tables:
        return ParsedBytes(None, skipped)
    if schema is None or extra == "infer":
        return ParsedBytes(pa.concat_tables(tables, promote_options="permissive"), skipped)
    return ParsedBytes(pa.concat_tables(tables), skipped)


def split_tail(raw: bytes) -> tuple[bytes, bool]:
    """Cut a truncated last line (a killed writer); return the complete lines and whether one was cut."""
    if not raw or raw.endswith(b"\n"):
        return raw, False
    cut = raw.rfind(b"\n") + 1
    return raw[:cut], bool(raw[cut:].strip())


def read_manifest(run_dir: Path) -> RunManifest:
    """``run.json`` as a ``RunManifest``, with a clear error when the folder is not a run."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise AuditError(f"{run_dir} is not a run folder (no such directory)")
    path = run_dir / RUN_MANIFEST
    if not path.exists():
        raise AuditError(f"{run_dir} is not a run folder: no {RUN_MANIFEST}")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AuditError(f"{path} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise AuditError(f"{path} is unreadable: not a JSON object")
    return RunManifest.from_json(data)


def _empty(fields: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({name: pa.array([], type=dtype) for name, dtype in fields.items()})


def _kind_table(table: pa.Table, kind: str) -> pa.Table:
    fields = REQUEST_USED if kind == KIND_REQUEST else tuple(KIND_FIELDS[kind])
    mask = pc.equal(table.column("kind"), kind)
    hits = pc.sum(mask).as_py() or 0
    if hits == 0:
        return _empty({name: UNION_SCHEMA.field(name).type for name in fields})
    # select first: filtering copies only the columns this kind uses
    part = table.select(list(fields)).filter(mask)
    # repeated text kept as a dictionary from the start: a chunk's rows cost a few bytes each, not the text
    # again per row (the frame's categories come out in the same first-seen order as encoding the whole column)
    for idx, (name, dtype) in enumerate(zip(part.column_names, part.schema.types, strict=True)):
        if name in CATEGORICAL and pa.types.is_string(dtype):
            part = part.set_column(idx, name, pc.dictionary_encode(part.column(idx)))
    return part


def _with_logical_id(table: pa.Table) -> pa.Table:
    """Fill an empty ``logical_id`` with the request id (a first attempt is its own logical request)."""
    rid, lid = table.column("request_id"), table.column("logical_id")
    missing = pc.fill_null(pc.or_kleene(pc.is_null(lid), pc.equal(lid, "")), True)
    if pc.any(missing).as_py():
        lid = pc.if_else(missing, rid, lid)
        table = table.set_column(table.schema.get_field_index("logical_id"), "logical_id", lid)
    return table


def _logical_codes(lid: pa.ChunkedArray) -> np.ndarray:
    """``logical_code``: one int per logical request, in first-seen order (folding then groups integers,
    not a million strings)."""
    column = lid.combine_chunks()
    fixed = _fixed_width_codes(column)
    if fixed is not None:
        return fixed
    # pandas' hash factorize on the arrow strings is ~2x faster than arrow's dictionary_encode here
    codes, uniques = pd.factorize(pd.Series(column, dtype=pd.ArrowDtype(pa.string())))
    missing_ids = codes < 0
    if missing_ids.any():  # neither id (a hand-written line): each such attempt is its own logical request
        codes[missing_ids] = len(uniques) + np.arange(int(missing_ids.sum()))
    return codes.astype(np.int64)


_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5], dtype=np.uint64)


def _fixed_width_codes(column: pa.StringArray) -> np.ndarray | None:
    """The codes of ``pd.factorize`` on ids that all have one length of whole 8-byte words (rushhour's own:
    32 hex digits), from a 64-bit mix of their bytes; None for any other column, or on a hash collision.

    A tenth of the time and memory of hashing a million strings. Fail-safe: every row is checked to equal
    the first row of its code word for word, so a collision falls back to the string factorize.
    """
    n = len(column)
    if n == 0 or column.null_count:
        return None
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[column.offset:column.offset + n + 1]
    width = int(offsets[1] - offsets[0])
    if width == 0 or width % 8 or width // 8 > len(_MIX) or not (np.diff(offsets) == width).all():
        return None  # not every id one width of whole words
    data = np.frombuffer(column.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    words = data.view(np.uint64).reshape(n, width // 8)
    with np.errstate(over="ignore"):
        mixed = np.zeros(n, dtype=np.uint64)
        for i in range(width // 8):
            mixed ^= words[:, i] * _MIX[i]
            mixed = (mixed << np.uint64(29)) | (mixed >> np.uint64(35))
    codes, first = first_seen_codes(mixed)
    representative = first[codes]
    for i in range(width // 8):
        if not np.array_equal(words[:, i], words[representative, i]):
            return None  # two ids share a mix: hash the strings instead
    return codes  # int64 already: no copy of a column of codes


PART_ROWS = 1 << 14  # keys a part of ``first_seen_codes`` holds on average: its hash table stays in cache


def first_seen_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(keys)``'s codes (first-seen order) and each code's first row, hashed a part at a time.

    One hash table of ten million keys misses the cache on nearly every probe: factorizing 10M keys took
    20x as long as 1M. The keys (well mixed: their top bits are uniform) are split by their top bits into
    parts of ~``PART_ROWS``, each factorized on its own in cache; a key's global code is then the number of
    distinct keys first seen before it, which a running count over the first sightings gives.
    """
    n = len(keys)
    bits = int(np.ceil(np.log2(n / PART_ROWS))) if n > PART_ROWS else 0
    if bits == 0:
        codes, uniques = pd.factorize(keys)
        return codes.astype(np.int64), _first_places(codes, len(uniques))
    bits = min(bits, 16)
    part = (keys >> np.uint64(64 - bits)).astype(np.uint16)
    order = np.argsort(part, kind="stable")  # a radix sort: within a part, rows keep their order
    bounds = np.zeros((1 << bits) + 1, dtype=np.int64)
    np.cumsum(np.bincount(part, minlength=1 << bits), out=bounds[1:])
    del part
    grouped = keys[order]
    seen_first = np.zeros(n, dtype=bool)
    pieces = []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if lo == hi:
            continue
        local, uniques = pd.factorize(grouped[lo:hi])
        rows = order[lo + _first_places(local, len(uniques))]  # first sightings: a part keeps its rows in order
        seen_first[rows] = True
        pieces.append((lo, hi, local, rows))
    del grouped
    rank = np.cumsum(seen_first, dtype=np.int64) - 1  # distinct keys first seen up to each row, less one
    first = np.empty(int(rank[-1]) + 1, dtype=np.int64)
    grouped_codes = np.empty(n, dtype=np.int64)
    for lo, hi, local, rows in pieces:
        global_codes = rank[rows]
        first[global_codes] = rows
        grouped_codes[lo:hi] = global_codes[local]
    codes = np.empty(n, dtype=np.int64)
    codes[order] = grouped_codes
    return codes, first


def _first_places(codes: np.ndarray, count: int) -> np.ndarray:
    """Where each of ``count`` codes first occurs in ``codes`` (later writes of a reversed scatter win)."""
    first = np.empty(count, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
    return first


TRIM_EVERY = 8  # columns converted between two trims: at a million rows, ~40 MB fewer at the load's peak


def tier_order(table: pa.Table) -> np.ndarray | None:
    """The rows' order grouped by tier, stable within a tier (None: already grouped, or no tier column).

    The audit computes each tier on its own rows: grouped, those rows are one slice of every column (a
    view), not a copy of the tier's share of the run. (Taking the rows in this order costs ~0.2 s at a
    million; splitting each parsed chunk by tier instead cost 1.2 s more: three times the filters and
    dictionaries.)
    """
    if "tier" not in table.column_names or table.num_rows < 2:
        return None
    encoded = pc.dictionary_encode(table.column("tier")).combine_chunks()
    keys = np.asarray(encoded.indices.fill_null(len(encoded.dictionary)), dtype=np.int64)  # no tier: last
    if (np.diff(keys) != 0).sum() < len(np.unique(keys)):  # each tier's rows already one run
        return None
    return np.argsort(keys.astype(np.int16) if keys.max() < 1 << 15 else keys, kind="stable")


def _to_frame(tables: list[pa.Table], order: np.ndarray | None = None,
              beside: ThreadPoolExecutor | None = None) -> pd.DataFrame:
    """The rows of ``tables`` (consumed: the caller's list is emptied) as a DataFrame, one column at a time.

    Each arrow column is released as soon as its pandas column exists, so the conversion never holds
    two copies of the whole table. Text of few distinct values becomes categorical; times and counts
    may be absent: float64 + NaN keeps numpy speed (ns fit exactly up to ~104 days); flags absent = False.
    ``order``: the rows are taken in this order (a column at a time, as they are converted).
    ``beside``: the text columns dearest to convert (ids, task ids: ~40 % of the conversion) are converted
    there (arrow lets go of the GIL) while this thread converts the rest, and here too once it is done.
    """
    table = pa.concat_tables(tables)
    tables.clear()
    names, types = table.column_names, table.schema.types
    arrays = table.columns
    del table
    # The dear text columns go to a queue that the other thread drains once it is free (it hashes the ids'
    # codes first) and this one drains too once the rest is converted: whichever is free converts the next.
    dear: deque[tuple[str, pa.ChunkedArray, pa.DataType]] = deque()
    if beside is not None:
        for i in reversed(range(len(names))):
            if names[i] in _BESIDE:
                dear.appendleft((names[i], arrays.pop(i), types[i]))
    queued = {name for name, _, _ in dear}
    rest = [(n, t) for n, t in zip(names, types, strict=True) if n not in queued]
    converted: dict[str, Any] = {}
    where = places(order) if order is not None else None  # once for every numeric column

    def drain() -> None:
        while True:
            try:
                name, col, dtype = dear.popleft()  # atomic: each column is taken by one thread
            except IndexError:
                return
            converted[name] = _column(col, name, dtype, order, where)
            del col

    other = beside.submit(drain) if beside is not None and dear else None
    for i, (name, dtype) in enumerate(rest):
        if i % TRIM_EVERY == TRIM_EVERY - 1:
            trim()  # the arrow columns freed so far back to the kernel, not kept beside the frame's new ones
        converted[name] = _column(arrays.pop(0), name, dtype, order, where)  # popped: dropped once converted
    drain()
    if other is not None:
        other.result()
    out = {name: converted[name] for name in names}
    return pd.DataFrame(out, copy=False)


# Text columns converted beside the others: each costs as much as ten numeric columns (a take of a million
# strings, or a dictionary of ~100k task ids unified over every chunk).
_BESIDE = frozenset({"request_id", "logical_id", "twin_of", "task_id", "parent_id"})


def places(order: np.ndarray) -> np.ndarray:
    """Where each row goes when rows are taken in ``order`` (its inverse permutation)."""
    where = np.empty_like(order)
    where[order] = np.arange(len(order), dtype=order.dtype)
    return where


def _column(col: pa.ChunkedArray, name: str, dtype: pa.DataType, order: np.ndarray | None,
            where: np.ndarray | None = None) -> Any:
    """One arrow column as the frame holds it (see ``_to_frame``), its rows taken in ``order``.

    ``where``: ``places(order)``, when the caller converts many columns. Numbers and dictionary columns are
    written once, each row at its place (``_numbers``, ``_categorical``); the ids are reordered in arrow;
    flags and plain text are converted first and reordered in numpy (one fewer arrow temporary a column:
    numpy's column-sized arrays come on huge pages, arrow's on 4 KiB ones, and the page faults were a third
    of the conversion's time).
    """
    if name in _ARROW_TEXT and pa.types.is_string(dtype):
        if order is not None:
            col = col.combine_chunks().take(pa.array(order))  # one array taken: a chunked take costs ~40 % more
        # ids stay arrow strings (zero-copy, ~36 B a row), not a million Python str objects (~80 B each)
        return pd.Series(col, dtype=pd.ArrowDtype(pa.string()), copy=False)
    if where is None and order is not None:
        where = places(order)
    if pa.types.is_integer(dtype) or pa.types.is_floating(dtype):
        return pd.Series(_numbers(col, where), copy=False)
    if pa.types.is_dictionary(dtype) and pa.types.is_string(dtype.value_type) and col.num_chunks:
        return pd.Series(_categorical(col, where), copy=False)
    if name in CATEGORICAL and pa.types.is_string(dtype):
        col = pc.dictionary_encode(col)
    elif pa.types.is_boolean(dtype):
        col = pc.fill_null(col, False)
    series = col.to_pandas()
    if order is None:
        return series
    if isinstance(series.dtype, pd.CategoricalDtype):
        return pd.Series(pd.Categorical.from_codes(series.cat.codes.to_numpy()[order], dtype=series.dtype), copy=False)
    return pd.Series(series.to_numpy()[order], copy=False)  # a fresh array: pandas would copy it again


def _categorical(col: pa.ChunkedArray, where: np.ndarray | None) -> pd.Categorical:
    """A dictionary column (each chunk its own dictionary) as one Categorical, with arrow's categories.

    arrow's ``to_pandas`` unifies the chunks' dictionaries in a way that grew ~20x from 1M to 10M rows for
    a column of a million distinct task ids (18 s). Here the chunks' distinct dictionaries are factorized as
    one array, in chunk order: the categories come out as arrow's unification makes them (each chunk's
    dictionary in turn, its values not seen before appended). Each chunk's indices then map through it
    (null: -1), written to the rows' places (``where``).
    """
    # the chunks of one ``dictionary_encode`` call share its whole dictionary (one memory): joined once
    dictionaries: list[pa.Array] = []
    start_of: dict[tuple[int, ...], int] = {}
    starts = []
    total = 0
    for chunk in col.chunks:
        dictionary = chunk.dictionary
        key = (*(b.address if b is not None else 0 for b in dictionary.buffers()[1:3]), dictionary.offset,
               len(dictionary))
        if key not in start_of:
            start_of[key] = total
            dictionaries.append(dictionary)
            total += len(dictionary)
        starts.append(start_of[key])
    joined = pa.chunked_array(dictionaries, type=col.type.value_type).combine_chunks()
    entry_codes, uniques = pd.factorize(pd.Series(joined, dtype=pd.ArrowDtype(pa.string()), copy=False))
    categories = pd.Index(uniques, dtype="str")
    codes: np.ndarray[tuple[int], np.dtype[np.signedinteger[Any]]] = np.empty(
        len(col), dtype=np.int32 if len(categories) >= 1 << 15 else np.int16)
    row = 0
    for chunk, start in zip(col.chunks, starts, strict=True):
        indices = chunk.indices
        if not len(chunk.dictionary):  # every row null
            mapped: np.ndarray = np.full(len(chunk), -1, dtype=codes.dtype)
        elif indices.null_count:
            local = indices.fill_null(-1).to_numpy()
            mapped = np.where(local < 0, -1, entry_codes[start + np.maximum(local, 0)])
        else:
            mapped = entry_codes[start + indices.to_numpy()]
        if where is None:
            codes[row:row + len(chunk)] = mapped
        else:
            codes[where[row:row + len(chunk)]] = mapped
        row += len(chunk)
    return pd.Categorical.from_codes(codes, categories=categories)


def _numbers(col: pa.ChunkedArray, where: np.ndarray | None) -> np.ndarray:
    """A numeric column as float64 (NaN where absent), row i at ``where[i]``: written once, straight from arrow.

    Each chunk is read in place (a view of arrow's buffer when it has no nulls) and cast as it is copied
    into the one array the frame keeps (``where``: ``places(order)``, None to keep the rows' order). The
    conversion through pandas made two or three column-sized temporaries first (int64, float64, the
    reordered copy): fresh memory, which a VM that hands free pages back to its host pays for on every touch.
    """
    out = np.empty(len(col), dtype=np.float64)
    start = 0
    for chunk in col.chunks:
        end = start + len(chunk)
        values = chunk.to_numpy(zero_copy_only=False)  # nulls: float64 + NaN (a chunk-sized copy)
        if where is None:
            out[start:end] = values
        else:
            out[where[start:end]] = values
        start = end
    return out


@dataclass
class ShardParts:
    """One shard parsed a chunk at a time: its rows per kind (on the writer's clock) and what it said of itself."""

    per_kind: dict[str, list[pa.Table]] = field(default_factory=lambda: {kind: [] for kind in KIND_FIELDS})
    headers: list[pa.Table] = field(default_factory=list)  # its shard header line(s)
    skipped: int = 0
    cut: bool = False  # its last line was cut (a killed writer)
    worker_starts: int = 0
    worker_stops: int = 0
    parsed: bool = False  # at least one line parsed
    body_bytes: int = 0  # complete lines
    columnar_bytes: int = 0  # the leading bytes read from the shard's verified sidecar, not parsed


_SHARD_COLUMNS = ["host", "pid", "mono_anchor_ns", "wall_anchor_ns", "clock_uncertainty_ns"]


def _add_chunk(parts: ShardParts, table: pa.Table) -> None:
    """Split one parsed chunk by kind, keeping only the columns each kind uses (the chunk itself is dropped)."""
    parts.parsed = True
    kinds = table.column("kind")
    # how many lines of each kind: a kind absent from the chunk costs nothing more (most chunks hold 2 or 3)
    tally = pc.value_counts(kinds)
    counts = dict(zip(tally.field("values").to_pylist(), tally.field("counts").to_pylist(), strict=True))
    known = (*KIND_FIELDS, KIND_SHARD)
    parts.skipped += sum(n for kind, n in counts.items() if kind is not None and kind not in known)
    parts.skipped += kinds.null_count
    if counts.get(KIND_SHARD):
        parts.headers.append(table.select(_SHARD_COLUMNS).filter(pc.equal(kinds, KIND_SHARD)))
    if counts.get(KIND_EVENT):
        names = pc.filter(table.column("name"), pc.equal(kinds, KIND_EVENT))
        parts.worker_starts += pc.sum(pc.equal(names, "worker_start")).as_py() or 0
        parts.worker_stops += pc.sum(pc.equal(names, "worker_stop")).as_py() or 0
    for kind in KIND_FIELDS:
        if counts.get(kind):
            parts.per_kind[kind].append(_kind_table(table, kind))


def read_shard(path: Path, chunk_bytes: int | None = None, columnar: bool = True) -> ShardParts:
    """Parse one shard ``chunk_bytes`` of whole lines at a time from a memory map.

    Each chunk's pages are handed back to the kernel once parsed and only the columns the audit uses
    are kept, so memory follows the parsed rows, not the size of the file (a 10M-attempt run has 9 GB
    of shards). Bad lines are isolated within their chunk exactly as within a whole shard.
    ``columnar``: the leading lines that the shard's sidecar holds, checked against these very bytes, are
    taken from it instead of parsed (``records/columns.py``); the rest is parsed.
    """
    parts = ShardParts()
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return parts
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        body = mapped.rfind(b"\n") + 1  # complete lines end here; after it, a killed writer's cut line
        parts.cut = bool(mapped[body:].strip())
        parts.body_bytes = body
        parts.skipped += int(parts.cut)
        pos = 0
        if columnar:
            group: list[pa.RecordBatch] = []
            for batch, end in sidecar.verified_batches(path, mapped, body, PARSE_SCHEMA):
                group.append(batch)
                del batch
                pos = end
                if len(group) == SIDECAR_GROUP:
                    _add_chunk(parts, pa.Table.from_batches(group))
                    group.clear()
            if group:
                _add_chunk(parts, pa.Table.from_batches(group))
            del group
            parts.columnar_bytes = pos
            if pos:
                mapped.madvise(mmap.MADV_DONTNEED, 0, pos - pos % mmap.PAGESIZE)  # checked: need not stay resident
        whole = pa.py_buffer(mapped)  # zero-copy: chunks are slices of the map
        # one shard parsed at a time (the parser uses every core anyway): the parse holds one chunk's memory
        with _PARSING if pos < body else contextlib.nullcontext():
            while pos < body:
                end = body
                if pos + chunk_bytes < body:
                    end = mapped.rfind(b"\n", pos, pos + chunk_bytes) + 1 or mapped.find(b"\n", pos + chunk_bytes) + 1
                parsed = parse_jsonl(whole.slice(pos, end - pos), PARSE_SCHEMA)
                parts.skipped += parsed.skipped
                if parsed.table is not None:
                    _add_chunk(parts, parsed.table)
                del parsed
                start = pos - pos % mmap.PAGESIZE
                mapped.madvise(mmap.MADV_DONTNEED, start, end - start)  # parsed: its pages need not stay resident
                pos = end
        del whole
    finally:
        with contextlib.suppress(BufferError):  # a slice still alive (an exception mid-parse): the GC unmaps it
            mapped.close()
    return parts


def _rebased(part: pa.Table, kind: str, offset: int) -> pa.Table:
    """``part`` with its times moved by ``offset`` ns (a shard's anchor onto the run's)."""
    if offset:
        for name in TIME_COLUMNS[kind]:
            idx = part.schema.get_field_index(name)
            part = part.set_column(idx, name, pc.add(part.column(name), offset))
    return part


def _read_shards(paths: list[Path], columnar: bool) -> Iterator[tuple[Path, ShardParts]]:
    """Each shard read, in order, the next one read meanwhile (arrow lets go of the GIL: the other core works)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        ahead: Future[ShardParts] | None = None
        for i, path in enumerate(paths):
            current = ahead or pool.submit(read_shard, path, columnar=columnar)
            ahead = pool.submit(read_shard, paths[i + 1], columnar=columnar) if i + 1 < len(paths) else None
            try:
                parts = current.result()
            except OSError as exc:
                if ahead is not None:
                    ahead.cancel()
                raise AuditError(f"cannot read shard {path}: {exc}") from None
            yield path, parts
            del parts, current


def load_run(run_dir: Path, columnar: bool = True) -> RunData:
    """Read ``run.json`` and every shard under ``records/``; shards may come from many processes.

    ``columnar=False``: parse every line, whatever sidecars the shards have.
    """
    run_dir = Path(run_dir)
    lean_allocators()
    manifest = read_manifest(run_dir)
    paths = sorted((run_dir / RECORDS_DIR).glob("*.jsonl"))
    if not paths:
        raise AuditError(f"{run_dir} has no shards: {RECORDS_DIR}/*.jsonl is empty or missing")
    run_anchor = manifest.mono_anchor_ns
    per_kind: dict[str, list[pa.Table]] = {kind: [] for kind in KIND_FIELDS}
    skipped = truncated = columnar_bytes = shard_bytes = 0
    processes: set[tuple[str, int]] = set()
    lost: list[str] = []
    clock = ClockAlignment()
    for path, parts in _read_shards(paths, columnar):
        columnar_bytes += parts.columnar_bytes
        shard_bytes += parts.body_bytes
        truncated += int(parts.cut)
        skipped += parts.skipped
        if not parts.parsed:
            continue
        offset = 0
        headers = pa.concat_tables(parts.headers) if parts.headers else None
        if headers is not None:
            host = headers.column("host")[0].as_py() or path.stem
            pid = headers.column("pid")[0].as_py() or 0
            if not path.stem.endswith("-calibration"):  # the idle probes' own shard is not a load process
                processes.add((f"{host}:{pid}:{path.name}", pid))  # one shard per process by contract
            shard_anchor = headers.column("mono_anchor_ns")[0].as_py()
            shard_wall = headers.column("wall_anchor_ns")[0].as_py()
            run_wall = manifest.wall_anchor_ns
            if manifest.hostname and host != manifest.hostname:
                # Another machine's monotonic clock is unrelated to the run's: its records count from the
                # run's wall anchor as that host saw it (corrected by its measured offset to the master).
                clock.note(path.name, headers.column("clock_uncertainty_ns")[0].as_py())
                if isinstance(shard_wall, int) and isinstance(run_wall, int):
                    offset = shard_wall - run_wall
            # Records are ns from the writer's anchor; re-base them on the run's so shards share one clock.
            elif isinstance(shard_anchor, int) and isinstance(run_anchor, int):
                offset = shard_anchor - run_anchor
        elif not path.stem.endswith("-calibration"):
            processes.add((path.stem, 0))
        # a process that started (worker_start) and never said it stopped (worker_stop)
        if parts.worker_starts > parts.worker_stops and not path.stem.endswith("-calibration"):
            lost.append(path.stem)
        for kind in KIND_FIELDS:
            for part in parts.per_kind[kind]:
                per_kind[kind].append(_rebased(part, kind, offset))
        del parts
    frames = {}
    with ThreadPoolExecutor(max_workers=1) as pool:
        codes: Future[np.ndarray] | None = None
        for kind, tables in per_kind.items():
            if not tables:
                tables.append(_empty({name: REQUEST_FIELDS[name] for name in REQUEST_USED}) if kind == KIND_REQUEST
                              else _empty(KIND_FIELDS[kind]))
            order = None
            if kind == KIND_REQUEST:
                tables[:] = [_with_logical_id(pa.concat_tables(tables))]
                order = tier_order(tables[0])  # each tier's attempts one run of rows (see tier_order)
                # the ids hashed on the second core (arrow lets go of the GIL) while the columns are converted
                codes = pool.submit(_logical_codes, tables[0].column("logical_id"))
            frames[kind] = _to_frame(tables, order, pool)
            if codes is not None:
                ids = codes.result()
                frames[kind]["logical_code"] = ids if order is None else ids[order]  # the last column, as always
                codes = None
    pa.default_memory_pool().release_unused()  # the parser's scratch memory: give it back before the audit grows
    trim()
    events = [{str(k): v for k, v in row.items()} for row in frames[KIND_EVENT].to_dict("records")]
    return RunData(
        run_dir=run_dir,
        manifest=manifest,
        requests=frames[KIND_REQUEST],
        tasks=frames[KIND_TASK],
        health=frames[KIND_HEALTH],
        breakers=frames[KIND_BREAKER],
        events=events,
        shards=len(paths),
        skipped_lines=skipped,
        truncated_shards=truncated,
        processes=len(processes),
        lost_workers=lost,
        clock=clock,
        shard_bytes=shard_bytes,
        columnar_bytes=columnar_bytes,
    )


def read_jsonl_frame(path: Path, schema: pa.Schema | None = None, extra: str = "ignore"
                     ) -> tuple[pd.DataFrame, int]:
    """Any JSON-lines file as a DataFrame (e.g. the ledger), plus the number of lines skipped.

    ``extra``: what to do with fields outside ``schema``: "ignore" them or "infer" their types.
    """
    body, cut = split_tail(Path(path).read_bytes())
    parsed = parse_jsonl(body, schema, extra)
    if parsed.table is None:
        frame = pd.DataFrame({name: pd.Series(dtype="float64") for name in (schema.names if schema else [])})
        return frame, parsed.skipped + int(cut)
    return parsed.table.to_pandas(), parsed.skipped + int(cut)
