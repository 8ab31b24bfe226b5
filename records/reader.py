"""Reading a run's shards: one read_shard, the shard paths, every record of a run by kind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rushhour.records.schema import KIND_SHARD, RECORDS_DIR


@dataclass(slots=True)
class ShardContents:
    """What one shard held, split by kind, and how many lines could not be read."""

    path: Path
    header: dict[str, Any] | None
    lines: list[dict[str, Any]]
    skipped: int = 0
    truncated_tail: bool = False


def read_shard(path: Path) -> ShardContents:
    """Read one shard; a truncated last line (a killed writer) is skipped and counted, never fatal."""
    raw = Path(path).read_bytes()
    header: dict[str, Any] | None = None
    lines: list[dict[str, Any]] = []
    skipped = 0
    truncated_tail = bool(raw) and not raw.endswith(b"\n")
    for chunk in raw.split(b"\n"):
        if not chunk.strip():
            continue
        try:
            obj = json.loads(chunk)
        except ValueError:
            skipped += 1
            continue
        if not isinstance(obj, dict):
            skipped += 1
            continue
        if obj.get("kind") == KIND_SHARD and header is None:
            header = obj
        else:
            lines.append(obj)
    return ShardContents(Path(path), header, lines, skipped, truncated_tail)


def shard_paths(run_dir: Path) -> list[Path]:
    return sorted((Path(run_dir) / RECORDS_DIR).glob("*.jsonl"))


def iter_run(run_dir: Path, kind: str | None = None) -> Iterator[dict[str, Any]]:
    """Every line of every shard of a run (optionally of one kind), in shard order."""
    for path in shard_paths(run_dir):
        for line in read_shard(path).lines:
            if kind is None or line.get("kind") == kind:
                yield line
