"""Load every shard of a run into DataFrames, vectorised, tolerant of truncated and malformed lines."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from audit.errors import AuditError
from loadgen.manifest import RUN_MANIFEST, RunManifest
from loadgen.record import (
    KIND_BREAKER,
    KIND_EVENT,
    KIND_HEALTH,
    KIND_REQUEST,
    KIND_SHARD,
    KIND_TASK,
    RECORDS_DIR,
)

_I = pa.int64()
_F = pa.float64()
_S = pa.string()
_B = pa.bool_()

# Every field of every line kind, typed. Fields that hold free objects (event ``detail``, ``token_ns``)
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
    "twin_of": _S, "control": _B,
}
TASK_FIELDS: dict[str, pa.DataType] = {
    "seq": _I, "task_id": _S, "persona": _S, "tier": _S, "tenant": _S, "session_id": _S, "start_ns": _I,
    "deadline_ns": _I, "end_ns": _I, "outcome": _S, "steps": _I, "calls": _I, "calls_failed": _I,
    "first_failure": _S, "ideal_ns": _I,
}
HEALTH_FIELDS: dict[str, pa.DataType] = {
    "ts_ns": _I, "loop_lag_ns": _I, "cpu_percent": _F, "in_flight": _I, "not_sent_total": _I,
    "sent_total": _I,
}
BREAKER_FIELDS: dict[str, pa.DataType] = {
    "ts_ns": _I, "route": _S, "state": _S, "previous": _S, "cause": _S,
}
EVENT_FIELDS: dict[str, pa.DataType] = {"ts_ns": _I, "name": _S}
SHARD_FIELDS: dict[str, pa.DataType] = {"host": _S, "pid": _I, "mono_anchor_ns": _I, "wall_anchor_ns": _I,
                                        "clock_offset_ns": _I, "clock_uncertainty_ns": _I}

# Request columns the audit reads; the rest of a record (endpoint, model, key fingerprint …) is
# parsed for validation but never converted, which keeps a million rows cheap.
REQUEST_USED = (
    "seq", "request_id", "logical_id", "tier", "tenant", "persona", "task_id", "attempt", "retry_reason",
    "route", "intended_ns", "sent_ns", "headers_ns", "first_token_ns", "last_token_ns", "done_ns", "tokens",
    "itl_max_ns", "status", "reason", "error", "in_band_error", "complete", "cancelled", "not_sent",
    "client_timeout", "transport_error", "retry_after_s", "prompt_tokens", "output_tokens", "prompt_bytes",
    "service_tier", "reconnected",
    "prompt_tokens_intended", "prompt_tokens_exact", "max_tokens", "output_pinned", "abandoned",
    "twin_of", "control",
)

KIND_FIELDS: dict[str, dict[str, pa.DataType]] = {
    KIND_REQUEST: REQUEST_FIELDS,
    KIND_TASK: TASK_FIELDS,
    KIND_HEALTH: HEALTH_FIELDS,
    KIND_BREAKER: BREAKER_FIELDS,
    KIND_EVENT: EVENT_FIELDS,
}

# Columns shifted when a shard's anchor differs from the run's (a worker on its own anchor).
TIME_COLUMNS: dict[str, tuple[str, ...]] = {
    KIND_REQUEST: ("intended_ns", "sent_ns", "headers_ns", "first_token_ns", "last_token_ns", "done_ns"),
    KIND_TASK: ("start_ns", "deadline_ns", "end_ns"),
    KIND_HEALTH: ("ts_ns",),
    KIND_BREAKER: ("ts_ns",),
    KIND_EVENT: ("ts_ns",),
}
# Low-cardinality text: dictionary-encoded, so a million rows cost a few bytes each.
CATEGORICAL = ("tier", "tenant", "persona", "route", "reason", "error", "in_band_error", "retry_reason",
               "endpoint", "model", "dialect", "service_tier", "outcome", "first_failure", "state",
               "previous", "cause", "name", "task_id")


def _union_schema() -> pa.Schema:
    fields: dict[str, pa.DataType] = {"kind": _S, "schema": _I}
    for table in (*KIND_FIELDS.values(), SHARD_FIELDS):
        for name, dtype in table.items():
            fields.setdefault(name, dtype)
    return pa.schema(list(fields.items()))


UNION_SCHEMA = _union_schema()
_CHUNK_LINES = 50_000  # bisection unit after a failed parse: a bad line costs little re-parsing
_BLOCK_BYTES = 4 << 20  # pyarrow block: the unit of parallel parsing
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


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


def parse_jsonl(data: bytes, schema: pa.Schema | None = None, extra: str = "ignore") -> ParsedBytes:
    """Parse complete JSON lines; a bad line is isolated by bisection and counted, never fatal.

    The bulk goes through pyarrow in one call (zero-copy, multi-threaded); only when that fails is
    the text split by lines and bisected, so a handful of malformed lines costs a few re-parses of
    the chunks around them rather than a Python loop over every line.
    """
    if not data or (len(data) < 4096 and not data.strip()):  # never copy a big shard just to look at it
        return ParsedBytes(None, 0)
    buf = pa.py_buffer(data)
    try:
        return ParsedBytes(_parse(buf, schema, extra), 0)
    except _ARROW_ERRORS:
        pass
    view = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(view == 10) + 1  # exclusive end of each line
    if len(ends) == 0 or ends[-1] != len(data):
        ends = np.append(ends, len(data))
    starts = np.concatenate(([0], ends[:-1]))
    tables: list[pa.Table] = []
    skipped = 0

    def span(lo: int, hi: int) -> None:
        nonlocal skipped
        a, b = int(starts[lo]), int(ends[hi - 1])
        if not data[a:b].strip():
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
    return table.select(list(fields)).filter(mask)


def _with_logical_code(table: pa.Table) -> pa.Table:
    """Fill an empty ``logical_id`` with the request id and add ``logical_code``: one int per logical request.

    Folding retries then groups integers, not a million Python strings.
    """
    rid, lid = table.column("request_id"), table.column("logical_id")
    missing = pc.fill_null(pc.or_kleene(pc.is_null(lid), pc.equal(lid, "")), True)
    if pc.any(missing).as_py():
        lid = pc.if_else(missing, rid, lid)
        table = table.set_column(table.schema.get_field_index("logical_id"), "logical_id", lid)
    # pandas' hash factorize on the arrow strings is ~2x faster than arrow's dictionary_encode here
    codes, uniques = pd.factorize(pd.Series(lid.combine_chunks(), dtype=pd.ArrowDtype(pa.string())))
    missing_ids = codes < 0
    if missing_ids.any():  # neither id (a hand-written line): each such attempt is its own logical request
        codes[missing_ids] = len(uniques) + np.arange(int(missing_ids.sum()))
    return table.append_column("logical_code", pa.array(codes.astype(np.int64)))


def _to_frame(table: pa.Table) -> pd.DataFrame:
    columns = {}
    for name in table.column_names:
        col = table.column(name)
        if name in CATEGORICAL and pa.types.is_string(col.type):
            col = pc.dictionary_encode(col)
        columns[name] = col
    frame = pa.table(columns).to_pandas(self_destruct=True, split_blocks=True)
    for name, dtype in zip(table.column_names, table.schema.types, strict=True):
        # Times and counts may be absent: float64 + NaN keeps numpy speed (ns fit exactly up to ~104 days).
        if name == "logical_code":
            continue
        if pa.types.is_integer(dtype):
            frame[name] = frame[name].astype("float64")
        elif pa.types.is_boolean(dtype):
            frame[name] = frame[name].fillna(False).astype(bool)
    return frame


def _lost(table: pa.Table) -> bool:
    """A shard whose process started (``worker_start``) and never said it stopped (``worker_stop``)."""
    names = table.filter(pc.equal(table.column("kind"), KIND_EVENT)).column("name")
    starts = pc.sum(pc.equal(names, "worker_start")).as_py() or 0
    stops = pc.sum(pc.equal(names, "worker_stop")).as_py() or 0
    return bool(starts > stops)


def load_run(run_dir: Path) -> RunData:
    """Read ``run.json`` and every shard under ``records/``; shards may come from many processes."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    paths = sorted((run_dir / RECORDS_DIR).glob("*.jsonl"))
    if not paths:
        raise AuditError(f"{run_dir} has no shards: {RECORDS_DIR}/*.jsonl is empty or missing")
    run_anchor = manifest.mono_anchor_ns
    per_kind: dict[str, list[pa.Table]] = {kind: [] for kind in KIND_FIELDS}
    skipped = truncated = 0
    processes: set[tuple[str, int]] = set()
    lost: list[str] = []
    clock = ClockAlignment()
    for path in paths:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise AuditError(f"cannot read shard {path}: {exc}") from None
        body, cut = split_tail(raw)
        truncated += int(cut)
        skipped += int(cut)
        parsed = parse_jsonl(body, UNION_SCHEMA)
        del raw, body
        skipped += parsed.skipped
        if parsed.table is None:
            continue
        table = parsed.table
        kinds = table.column("kind")
        unknown = pc.sum(pc.invert(pc.is_in(kinds, pa.array([*KIND_FIELDS, KIND_SHARD])))).as_py() or 0
        skipped += int(unknown) + table.column("kind").null_count
        offset = 0
        headers = table.filter(pc.equal(kinds, KIND_SHARD))
        if headers.num_rows:
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
        if _lost(table) and not path.stem.endswith("-calibration"):
            lost.append(path.stem)
        for kind in KIND_FIELDS:
            part = _kind_table(table, kind)
            if offset and part.num_rows:
                for name in TIME_COLUMNS[kind]:
                    idx = part.schema.get_field_index(name)
                    part = part.set_column(idx, name, pc.add(part.column(name), offset))
            if part.num_rows:
                per_kind[kind].append(part)
    frames = {}
    for kind, tables in per_kind.items():
        if tables:
            merged = pa.concat_tables(tables)
        elif kind == KIND_REQUEST:
            merged = _empty({name: REQUEST_FIELDS[name] for name in REQUEST_USED})
        else:
            merged = _empty(KIND_FIELDS[kind])
        per_kind[kind] = []
        if kind == KIND_REQUEST:
            merged = _with_logical_code(merged)
        frames[kind] = _to_frame(merged)
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
