"""One process's append-only shard of records (and its columnar sidecar): the only writer of record lines."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rushhour.records.schema import KIND_SHARD, RECORDS_DIR, SCHEMA_VERSION, Anchor, Record, record_line

if TYPE_CHECKING:
    from rushhour.records.columns import SidecarWriter



class ShardWriter:
    """Append-only JSONL shard for one process.

    Lines are buffered briefly and handed to the kernel at least every ``flush_interval_s`` or
    ``flush_lines`` lines, so a ``kill -9`` loses at most that window; ``close`` fsyncs. Writes
    are serialised by a lock, so greenlets and threads may share one writer.

    ``columns`` (default on): the lines handed to the kernel are also kept as typed Arrow batches in the
    shard's sidecar (``records/columns.py``), which spares the audit the JSON parse of the lines it covers.
    """

    def __init__(
        self,
        path: Path,
        *,
        run_id: str,
        anchor: Anchor,
        flush_interval_s: float = 0.2,
        flush_lines: int = 256,
        header: dict[str, Any] | None = None,
        columns: bool = True,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.anchor = anchor
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._buffer: list[bytes] = []
        self._rows: list[dict[str, Any]] = []  # the buffered lines' fields, for the sidecar
        self._lock = threading.Lock()
        self._flush_interval_ns = int(flush_interval_s * 1e9)
        self._flush_lines = flush_lines
        self._last_flush_ns = time.monotonic_ns()
        self._seq = 0
        self.closed = False
        self.error: OSError | None = None  # the first failed write (a full disk): later lines are counted
        self.lost_lines = 0
        self.columns: SidecarWriter | None = None
        if columns and os.fstat(self._fd).st_size == 0:  # appending to an older shard: its bytes are not covered
            from rushhour.records.columns import SidecarWriter  # pyarrow: only a writer that keeps a sidecar loads it

            self.columns = SidecarWriter(self.path)
        header = {
            "kind": KIND_SHARD,
            "schema": SCHEMA_VERSION,
            "run_id": run_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "mono_anchor_ns": anchor.mono_ns,
            "wall_anchor_ns": anchor.wall_ns,
            **(header or {}),  # e.g. a remote worker's clock offset to the master (loadgen/ship.py)
        }
        line = json.dumps(header, separators=(",", ":")).encode() + b"\n"
        self._write_now(line)
        if self.columns is not None:
            self.columns.add([header], line)

    @classmethod
    def for_process(
        cls, run_dir: Path, *, run_id: str, anchor: Anchor, role: str = "", header: dict[str, Any] | None = None
    ) -> ShardWriter:
        """The conventional shard path for this process: ``records/<host>-<pid>.jsonl``."""
        name = f"{socket.gethostname()}-{os.getpid()}{('-' + role) if role else ''}.jsonl"
        return cls(Path(run_dir) / RECORDS_DIR / name, run_id=run_id, anchor=anchor, header=header)

    def next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def write(self, record: Record) -> None:
        data, line = record_line(record)
        with self._lock:
            if self.closed:
                raise ValueError(f"shard {self.path} is closed")
            self._buffer.append(line)
            if self.columns is not None:
                self._rows.append(data)
            now = time.monotonic_ns()
            if len(self._buffer) >= self._flush_lines or now - self._last_flush_ns >= self._flush_interval_ns:
                self._flush_locked(now)

    def flush(self) -> None:
        """Hand buffered lines to the kernel (they then survive a kill of this process)."""
        with self._lock:
            if not self.closed:
                self._flush_locked(time.monotonic_ns())

    def close(self) -> None:
        """Flush, fsync and close; safe to call twice and from a signal handler's path."""
        with self._lock:
            if self.closed:
                return
            self._flush_locked(time.monotonic_ns())
            if self.columns is not None:
                self.columns.close()
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self.error = self.error or exc
            finally:
                os.close(self._fd)
                self.closed = True

    def _flush_locked(self, now_ns: int) -> None:
        if self._buffer:
            lines = len(self._buffer)
            blob = b"".join(self._buffer)
            try:
                self._write_now(blob)
            except OSError as exc:
                # A full disk must not crash the greenlet that happened to flush: the writer keeps the
                # first error (the worker stops the run on it) and counts what could not be written.
                self.error = self.error or exc
                self.lost_lines += lines
                if self.columns is not None:
                    self.columns.stop()  # bytes may be half written: the sidecar covers what came before
            else:
                if self.columns is not None:
                    self.columns.add(self._rows, blob)  # only lines the kernel holds
            self._buffer.clear()
            self._rows = []
        self._last_flush_ns = now_ns

    def _write_now(self, data: bytes) -> None:
        if self.error is not None:
            raise self.error  # once the disk was full, no half lines after the cut
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
