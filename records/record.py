"""The record contract: one flat JSON line per request attempt, written append-only per process.

This module is stdlib-only on purpose (orjson, when present, only writes the same bytes faster): every
stage (Locust workers, the audit, other tools) reads and writes it, so it must import nothing heavy and
never change meaning silently. Bump
``SCHEMA_VERSION`` on any incompatible change and keep the reader accepting older versions.

Records hold raw facts, never conclusions: the audit classifies outcomes, so a run can be
re-audited with a better classifier without re-sending a single request.

Times are integer nanoseconds from the run's monotonic anchor (``run.json``: ``mono_anchor_ns``),
so records from several processes on one machine share one clock, and align with the testbed's
ledger, which stores raw ``CLOCK_MONOTONIC`` nanoseconds.

This module is the contract's public face; its parts live beside it: ``schema`` (line kinds, fields, the one
serialisation), ``redact`` (credentials never reach a record), ``writer`` (a process's shard) and ``reader``.
"""

from __future__ import annotations

from rushhour.records.reader import (
    ShardContents,
    iter_run,
    read_shard,
    shard_paths,
)
from rushhour.records.redact import (
    ECHO_MIN,
    MAX_TEXT,
    clean_text,
    error_summary,
    fingerprint,
    redact,
    register_secret,
    short_text,
    strip_userinfo,
)
from rushhour.records.schema import (
    DISK_FULL_ERRNOS,
    FIRST_TOKEN_KERNEL,
    FIRST_TOKEN_RECV,
    KIND_BREAKER,
    KIND_EVENT,
    KIND_HEALTH,
    KIND_REQUEST,
    KIND_SHARD,
    KIND_TASK,
    REASON_TEMPLATE,
    RECORDS_DIR,
    SCHEMA_VERSION,
    START_FAILED_MARK,
    Anchor,
    BreakerRecord,
    EventRecord,
    HealthRecord,
    Record,
    RequestRecord,
    TaskRecord,
    is_disk_full,
    record_line,
    to_json_line,
)
from rushhour.records.writer import (
    ShardWriter,
)

__all__ = [
    "DISK_FULL_ERRNOS",
    "ECHO_MIN",
    "FIRST_TOKEN_KERNEL",
    "FIRST_TOKEN_RECV",
    "KIND_BREAKER",
    "KIND_EVENT",
    "KIND_HEALTH",
    "KIND_REQUEST",
    "KIND_SHARD",
    "KIND_TASK",
    "MAX_TEXT",
    "REASON_TEMPLATE",
    "RECORDS_DIR",
    "SCHEMA_VERSION",
    "START_FAILED_MARK",
    "Anchor",
    "BreakerRecord",
    "EventRecord",
    "HealthRecord",
    "Record",
    "RequestRecord",
    "ShardContents",
    "ShardWriter",
    "TaskRecord",
    "clean_text",
    "error_summary",
    "fingerprint",
    "is_disk_full",
    "iter_run",
    "read_shard",
    "record_line",
    "redact",
    "register_secret",
    "shard_paths",
    "short_text",
    "strip_userinfo",
    "to_json_line",
]
