"""The classified attempts table (``attempts.parquet``): the audit's one row per attempt, read by every later stage.

The audit is the only reader of records: it classifies every attempt once and writes this table
beside ``summary.json``. ``drops.csv``, ``compare``, the evidence and the reports read the table (or
the frame it was built from), never the shards, so "served" means one thing everywhere.

Staleness: the table's metadata holds a fingerprint of its inputs (``run.json`` and every shard:
name, size, mtime_ns and the SHA-256 of its last 64 KiB — shards only grow, so an append changes
size and tail, and hashing the whole of a 1 GB run would cost seconds) and the classifier version
(a hash of every stack profile's rule table). A table whose fingerprint differs is not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rushhour.audit.classify import rules_table
from rushhour.audit.fold import CALIBRATION_PERSONA, eq
from rushhour.records.columns import file_print
from rushhour.records.manifest import RUN_MANIFEST
from rushhour.records.record import RECORDS_DIR

ATTEMPTS_FILE = "attempts.parquet"
TABLE_SCHEMA = "rushhour.attempts/1"
ERROR_CUT = 200  # characters of the server's error text kept per attempt
META_KEY = b"rushhour"
ROW_GROUP = 1 << 17  # rows built and encoded at a time: ~20 MB of arrow per group

_TEXT = ("request_id", "logical_id", "tier", "tenant", "persona", "route", "profile", "reason", "error")
_TIMES = ("intended_ns", "sent_ns", "headers_ns", "first_token_ns", "done_ns", "ttft_ns", "e2e_ns", "tpot_ns")
_FLAGS = ("probe", "control", "reconnected", "in_band")

# Column → what it holds (docs/audit.md repeats this table).
COLUMNS: dict[str, str] = {
    "request_id": "the attempt's id",
    "logical_id": "the logical request it belongs to (retries and fallbacks share it)",
    "attempt": "attempt number within the logical request (1 = first)",
    "seq": "the writer's sequence number",
    "tier": "tier", "tenant": "tenant", "persona": "persona (``calibration`` = an idle probe)", "route": "route",
    "profile": "the stack profile whose rules classified it",
    "class": "the audit's outcome class (summary.OUTCOME_CLASSES)",
    "status": "raw HTTP status (0 = none)",
    "reason": "raw reason (the stack's reason header, or the error's code/type)",
    "error": f"error or in-band error text, cut to {ERROR_CUT} characters",
    "retry_after_s": "the server's Retry-After",
    "intended_ns": "intended send (ns from the run's anchor)",
    "sent_ns": "actual send", "headers_ns": "response headers", "first_token_ns": "first token", "done_ns": "end",
    "ttft_ns": "first token − send", "e2e_ns": "end − send", "tpot_ns": "(last − first token) / (tokens − 1)",
    "prompt_tokens": "prompt tokens", "output_tokens": "output tokens",
    "probe": "not a tier's own request: a calibration probe or a priority-control twin (excluded from every "
             "tier figure)",
    "control": "a priority-control twin (an equal-priority copy of another logical request)",
    "reconnected": "resent once on a fresh connection after a stale keep-alive one",
    "in_band": "the error came inside a 2xx stream",
}


def classifier_version() -> str:
    """A hash of every stack profile's rule table and status defaults: a new rule makes old tables stale."""
    text = json.dumps(rules_table(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(run_dir: Path) -> dict[str, Any]:
    """What the table was built from: ``run.json``, every shard, and the classifier version."""
    run_dir = Path(run_dir)
    manifest = run_dir / RUN_MANIFEST
    shards = sorted((run_dir / RECORDS_DIR).glob("*.jsonl"))
    return {
        "schema": TABLE_SCHEMA,
        "classifier": classifier_version(),
        "run_json": file_print(manifest) if manifest.exists() else None,
        "shards": [file_print(p) for p in shards],
    }


def _strings(series: pd.Series, cut: int | None = None) -> pa.Array:
    """Text as a dictionary-encoded arrow column (a run has few distinct tiers, reasons, errors)."""
    if not isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object).where(series.notna(), None).astype("category")
    cats = series.cat.categories.astype(str)
    if cut is not None:  # cut texts may collide: map each category to its cut value's index
        cut_values = pd.Index([c[:cut] for c in cats])
        uniques = pd.unique(cut_values.to_numpy())
        remap = pd.Index(uniques).get_indexer(cut_values)
    else:
        uniques, remap = cats.to_numpy(), np.arange(len(cats))
    codes = series.cat.codes.to_numpy()
    missing = codes < 0
    indices = pa.array(remap[np.where(missing, 0, codes)].astype(np.int32) if len(cats) else
                       np.zeros(len(codes), dtype=np.int32), mask=missing)
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(uniques), type=pa.string()))


def _ints(frame: pd.DataFrame, name: str) -> pa.Array:
    """A nullable int64 column from the frame's float64 (NaN = absent; a fractional ns is truncated)."""
    if name not in frame.columns:
        return pa.nulls(len(frame), type=pa.int64())
    values = pa.array(frame[name].to_numpy(dtype=np.float64), from_pandas=True)
    return values.cast(pa.int64(), safe=False)


def _plain_strings(series: pd.Series) -> pa.Array:
    """Unique-ish text (ids) as an arrow string column: zero-copy when pandas already holds arrow strings."""
    try:
        return pa.array(series, from_pandas=True).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(series.astype(object), type=pa.string(), from_pandas=True)


def _error_text(attempts: pd.DataFrame, in_band: np.ndarray) -> pa.Array:
    """The in-band error where there is one, else the error, cut, dictionary-encoded (done in arrow, not Python)."""
    n = len(attempts)
    parts = [_strings(attempts[name]).cast(pa.string()) if name in attempts.columns
             else pa.nulls(n, type=pa.string()) for name in ("in_band_error", "error")]
    merged = pc.if_else(pa.array(in_band), parts[0], parts[1])
    return pc.utf8_slice_codeunits(merged, 0, ERROR_CUT).dictionary_encode()


def build_table(attempts: pd.DataFrame) -> pa.Table:
    """The table from the audit's classified frame (every attempt, probes included and marked)."""
    n = len(attempts)

    def text(name: str) -> pd.Series:
        return attempts[name] if name in attempts.columns else pd.Series([None] * n, index=attempts.index)

    in_band = (attempts["in_band_error"].notna().to_numpy() if "in_band_error" in attempts.columns
               else np.zeros(n, dtype=bool))
    columns: dict[str, pa.Array] = {
        "request_id": _plain_strings(text("request_id")),
        "logical_id": _plain_strings(text("logical_id")),
        "attempt": _ints(attempts, "attempt"),
        "seq": _ints(attempts, "seq"),
    }
    for name in ("tier", "tenant", "persona", "route"):
        columns[name] = _strings(text(name))
    columns["profile"] = _strings(text("profile"))
    columns["class"] = _strings(text("cls"))
    columns["status"] = _ints(attempts, "status")
    columns["reason"] = _strings(text("reason"))
    columns["error"] = _error_text(attempts, in_band)
    columns["retry_after_s"] = pa.array(attempts["retry_after_s"].to_numpy(dtype=np.float64)
                                        if "retry_after_s" in attempts.columns else np.full(n, np.nan),
                                        from_pandas=True)
    for name in _TIMES:
        columns[name] = _ints(attempts, name)
    for name in ("prompt_tokens", "output_tokens"):
        columns[name] = _ints(attempts, name)
    twin = (attempts["control"].fillna(False).to_numpy(dtype=bool) if "control" in attempts.columns
            else np.zeros(n, dtype=bool))
    columns["probe"] = pa.array((eq(text("persona"), CALIBRATION_PERSONA) | twin) if n else np.zeros(0, dtype=bool))
    columns["control"] = pa.array(twin)
    columns["reconnected"] = pa.array(attempts["reconnected"].to_numpy(dtype=bool)
                                      if "reconnected" in attempts.columns else np.zeros(n, dtype=bool))
    columns["in_band"] = pa.array(in_band)
    return pa.table(columns)


# Integer columns of few distinct values, worth a parquet dictionary. Every other integer column (times, seq)
# is nearly unique: parquet would build a dictionary for each row group until it overflows and then fall
# back to plain, which at a million rows cost more than the rest of the encode (0.7 s of 1.2 s).
_FEW_VALUES = ("status", "attempt", "prompt_tokens", "output_tokens")


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns parquet should dictionary-encode: the text of few values, and ``_FEW_VALUES``."""
    return [f.name for f in schema if pa.types.is_dictionary(f.type) or f.name in _FEW_VALUES]


class TableWriter:
    """``attempts.parquet`` built and encoded on a second thread while the audit computes its summary.

    ``start`` hands over the classified frame (only read from then on); ``finish`` waits for the rows,
    adds the inputs' fingerprint (which names the summary written meanwhile) to the file's metadata and
    puts the file in place atomically; ``abort`` leaves no file. (The fingerprint is file metadata added at close, so
    ``stored_inputs`` reads the file's metadata, not the arrow schema's.) The rows are built and written
    ``ROW_GROUP`` at a time, so the arrow copy in memory is one row group's, not the whole table's.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / ATTEMPTS_FILE
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self._pool: ThreadPoolExecutor | None = None
        self._rows: Future[pq.ParquetWriter] | None = None
        self._stop = False

    def start(self, attempts: pd.DataFrame) -> Future[pq.ParquetWriter]:
        """Build and encode the rows on a thread of its own; the rows' future."""
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._rows = self._pool.submit(self._write_rows, attempts)
        return self._rows

    def _write_rows(self, attempts: pd.DataFrame) -> pq.ParquetWriter:
        writer: pq.ParquetWriter | None = None
        try:
            for lo in range(0, max(1, len(attempts)), ROW_GROUP):
                if self._stop:
                    break
                part = build_table(attempts.iloc[lo:lo + ROW_GROUP])
                if writer is None:
                    # zstd level 1: most of level 3's size at a fraction of its time (written on every audit)
                    writer = pq.ParquetWriter(self.tmp, part.schema, compression="zstd", compression_level=1,
                                              use_dictionary=dictionary_columns(part.schema))
                writer.write_table(part, row_group_size=ROW_GROUP)
                del part
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        assert writer is not None
        return writer

    def finish(self, inputs: dict[str, Any]) -> Path:
        """Wait for the rows, add ``inputs`` to the file's metadata and move the file into place."""
        assert self._rows is not None and self._pool is not None, "start() first"
        try:
            writer = self._rows.result()
        finally:
            self._pool.shutdown()
        writer.add_key_value_metadata({META_KEY.decode(): json.dumps(inputs)})
        writer.close()
        self.tmp.replace(self.path)
        return self.path

    def abort(self) -> None:
        """Stop writing the rows and leave no file behind."""
        self._stop = True
        if self._rows is not None and self._pool is not None:
            with contextlib.suppress(BaseException):
                self._rows.result().close()
            self._pool.shutdown()
        self.tmp.unlink(missing_ok=True)


def stored_inputs(run_dir: Path) -> dict[str, Any] | None:
    """The fingerprint an existing table was built from (None: no table, or unreadable)."""
    path = Path(run_dir) / ATTEMPTS_FILE
    try:
        meta = pq.read_metadata(path).metadata or {}  # the file's metadata: the schema's, and what was added at close
        value = json.loads(meta[META_KEY])
    except (OSError, KeyError, ValueError, pa.ArrowInvalid):
        return None
    return value if isinstance(value, dict) else None


def read_table(run_dir: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """The stored table as a DataFrame (text columns categorical, times nullable Int64 → float64 ns)."""
    return to_frame(pq.read_table(Path(run_dir) / ATTEMPTS_FILE, columns=columns))


def to_frame(table: pa.Table) -> pd.DataFrame:
    """The table as a DataFrame: text categorical, integer columns as float64 (NaN = absent)."""
    frame = table.to_pandas()
    for name in (*_TIMES, "attempt", "seq", "status", "prompt_tokens", "output_tokens"):
        if name in frame.columns:
            frame[name] = frame[name].astype("float64")
    return frame
