"""Trace readers (pure): Azure LLM CSV and Mooncake JSONL rows → (time, prompt tokens, output tokens, blocks)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: seconds from the trace's first row, sizes, and prefix block ids."""

    index: int
    t_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def detect_format(path: Path) -> str:
    with path.open("rb") as handle:
        head = handle.read(256).lstrip()
    if head.startswith(b"{"):
        return "mooncake"
    if head.upper().startswith(b"TIMESTAMP"):
        return "azure"
    raise ValueError(f"{path}: cannot tell the trace format (expected Azure CSV or Mooncake JSONL)")


def _azure_time(text: str) -> float:
    # 7-digit fractions ("18:15:46.6805900") are more than datetime's 6: cut to microseconds
    stamp = text.strip()
    if "." in stamp:
        head, frac = stamp.split(".", 1)
        stamp = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(stamp).timestamp()


def read_azure(path: Path) -> list[TraceRow]:
    """``TIMESTAMP,ContextTokens,GeneratedTokens`` with CRLF and possibly no final newline."""
    raw = path.read_text(encoding="utf-8")
    lines = [line for line in raw.replace("\r\n", "\n").replace("\r", "\n").split("\n") if line.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split(",")]
    try:
        i_ts, i_in, i_out = header.index("TIMESTAMP"), header.index("ContextTokens"), header.index("GeneratedTokens")
    except ValueError:
        raise ValueError(f"{path}: expected columns TIMESTAMP,ContextTokens,GeneratedTokens, got {header}") from None
    rows: list[TraceRow] = []
    t0: float | None = None
    for n, line in enumerate(lines[1:]):
        cols = line.split(",")
        ts = _azure_time(cols[i_ts])
        t0 = ts if t0 is None else t0
        rows.append(TraceRow(n, ts - t0, int(cols[i_in]), int(cols[i_out])))
    return rows


def read_mooncake(path: Path) -> list[TraceRow]:
    """JSONL ``{timestamp (ms), input_length, output_length, hash_ids}``."""
    rows: list[TraceRow] = []
    t0: float | None = None
    with path.open(encoding="utf-8") as handle:
        for n, line in enumerate(handle):
            if not line.strip():
                continue
            obj = json.loads(line)
            ts = float(obj["timestamp"]) / 1000.0
            t0 = ts if t0 is None else t0
            rows.append(
                TraceRow(
                    n,
                    ts - t0,
                    int(obj["input_length"]),
                    int(obj["output_length"]),
                    tuple(int(h) for h in obj.get("hash_ids", ())),
                )
            )
    return rows


def read_trace(path: Path, fmt: str = "auto") -> list[TraceRow]:
    fmt = detect_format(path) if fmt == "auto" else fmt
    return read_azure(path) if fmt == "azure" else read_mooncake(path)


def schedule(
    rows: list[TraceRow], *, time_scale: float, start_s: float, limit: int | None, end_s: float
) -> list[tuple[float, TraceRow]]:
    """(intended seconds from the run's start, row): rows from ``start_s`` on, sped up by ``time_scale``."""
    out: list[tuple[float, TraceRow]] = []
    for row in rows:
        if row.t_s < start_s:
            continue
        when = (row.t_s - start_s) / time_scale
        if when >= end_s:
            break
        out.append((when, row))
        if limit is not None and len(out) >= limit:
            break
    return out
