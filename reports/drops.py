"""``drops.csv``: every attempt that was not served, read from the run's raw records."""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from audit.summary import Summary
from loadgen.record import KIND_REQUEST, iter_run, shard_paths

COLUMNS = (
    "request_id",
    "logical_id",
    "tier",
    "tenant",
    "t_s",
    "status",
    "outcome",
    "reason",
    "retry_after_s",
    "route",
    "attempt",
    "error",
)

# Data URIs above this size are not embedded in the HTML; the report links the file instead.
EMBED_LIMIT = 1_000_000


def raw_outcome(rec: dict[str, Any]) -> str | None:
    """A coarse label from raw facts, or None when the attempt was served (the audit classifies finely)."""
    status = int(rec.get("status") or 0)
    if rec.get("not_sent"):
        return "not_sent"
    if rec.get("cancelled"):
        return "unfinished"  # the generator stopped while it was in flight
    if rec.get("client_timeout"):
        return "timeout"
    if rec.get("transport_error"):
        return "transport"
    if status == 200 and rec.get("in_band_error"):
        return "in_band_error"
    if status == 200 and rec.get("complete"):
        return None
    if status == 200:
        return "incomplete"
    return f"http_{status}" if status else "no_response"


def _t_s(rec: dict[str, Any]) -> float | None:
    ns = rec.get("sent_ns")
    if ns is None:
        ns = rec.get("intended_ns")
    return None if ns is None else round(ns / 1e9, 3)


def rows_from_records(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Not-served request attempts from the shards, sorted by time within each shard."""
    for rec in iter_run(run_dir, KIND_REQUEST):
        outcome = raw_outcome(rec)
        if outcome is None:
            continue
        yield {
            "request_id": rec.get("request_id", ""),
            "logical_id": rec.get("logical_id", ""),
            "tier": rec.get("tier", ""),
            "tenant": rec.get("tenant", ""),
            "t_s": _t_s(rec),
            "status": rec.get("status", 0),
            "outcome": outcome,
            "reason": rec.get("reason"),
            "retry_after_s": rec.get("retry_after_s"),
            "route": rec.get("route", ""),
            "attempt": rec.get("attempt", 1),
            "error": rec.get("error") or rec.get("in_band_error"),
        }


def rows_from_evidence(summary: Summary) -> Iterator[dict[str, Any]]:
    """The summary's evidence rows, when the run folder has no records (a copied summary.json)."""
    for ev in summary.evidence:
        yield {
            "request_id": ev.request_id,
            "logical_id": "",
            "tier": ev.tier,
            "tenant": "",
            "t_s": ev.t_s,
            "status": ev.status,
            "outcome": ev.outcome,
            "reason": ev.reason,
            "retry_after_s": ev.retry_after_s,
            "route": "",
            "attempt": "",
            "error": ev.error,
        }


def drop_rows(summary: Summary, run_dir: Path | None) -> list[dict[str, Any]]:
    """All drops, from the records when present, else from the summary's evidence, by time."""
    if run_dir is not None and shard_paths(run_dir):
        rows = list(rows_from_records(run_dir))
    else:
        rows = list(rows_from_evidence(summary))
    rows.sort(key=lambda r: (r["t_s"] is None, r["t_s"] or 0.0, str(r["request_id"])))
    return rows


def _cell(value: Any) -> str:
    """A CSV cell that a spreadsheet will not execute (formula injection is neutralised)."""
    if value is None:
        return ""
    text = str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def render_csv(rows: Iterable[dict[str, Any]]) -> str:
    """CSV text with a header line."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in COLUMNS])
    return buf.getvalue()


def data_uri(text: str) -> str | None:
    """A base64 ``data:`` URI of the CSV, or None when it is too large to embed."""
    raw = text.encode()
    if len(raw) > EMBED_LIMIT:
        return None
    return "data:text/csv;charset=utf-8;base64," + base64.b64encode(raw).decode()
