"""``drops.csv``: every attempt that was not served, in the audit's classes, from its attempts table."""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from rushhour.audit.summary import UNSERVED_CLASSES, Summary

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


def _none(value: Any) -> Any:
    return None if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)) else value


def rows_from_table(table: pd.DataFrame) -> Iterator[dict[str, Any]]:
    """Not-served attempts of the audit's table (calibration probes left out, as in every tier figure)."""
    drops = table[table["class"].isin(UNSERVED_CLASSES).to_numpy() & ~table["probe"].to_numpy()]
    when = drops["sent_ns"].fillna(drops["intended_ns"])
    for row, t_ns in zip(drops.to_dict("records"), when.to_numpy(), strict=True):
        status = _none(row["status"])
        yield {
            "request_id": row["request_id"],
            "logical_id": row["logical_id"],
            "tier": row["tier"],
            "tenant": _none(row["tenant"]) or "",
            "t_s": None if np.isnan(t_ns) else round(float(t_ns) / 1e9, 3),
            "status": 0 if status is None else int(status),
            "outcome": str(row["class"]),
            "reason": _none(row["reason"]),
            "retry_after_s": _none(row["retry_after_s"]),
            "route": _none(row["route"]) or "",
            "attempt": int(_none(row["attempt"]) or 1),
            "error": _none(row["error"]),
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


def drop_rows(summary: Summary, table: pd.DataFrame | None) -> list[dict[str, Any]]:
    """All drops, from the audit's attempts table when there is one, else from the summary's evidence, by time."""
    rows = list(rows_from_table(table)) if table is not None else list(rows_from_evidence(summary))
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
