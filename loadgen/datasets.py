"""Conversation datasets (pure): ShareGPT ``conversations`` or OpenAI ``messages`` rows, JSONL or Parquet.

Each row becomes a ``Dialog``: the row's system text and its turns (the user's text and the dataset's
own answer, whose length sizes the output when the scenario asks). Anything a load process could not
send is a ``DatasetError`` of one line naming the file and the row, raised when the scenario is checked,
before a run folder exists. Parquet needs pyarrow, imported only when a Parquet file is read.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.traces import TraceError

SHAREGPT = "sharegpt"
OPENAI = "openai"
FORMATS = ("auto", SHAREGPT, OPENAI)
# ShareGPT speakers (ShareGPT itself, Vicuna/FastChat, Bard and Gemini-style exports)
_SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                   "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant", "model": "assistant"}
_OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_DATASET_BYTES = 2 << 30  # every load process holds the rows in memory


class DatasetError(TraceError):
    """A dataset that cannot be used (one line: the file, the row, what is wrong)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn and the dataset's answer to it (None: the row ends with the user)."""

    user: str
    reply: str | None


@dataclass(frozen=True, slots=True)
class Dialog:
    """One conversation of the dataset: its row number (1-based), system text and turns."""

    row: int
    system: str
    turns: tuple[Turn, ...]


def read_dataset(path: Path, fmt: str = "auto", limit: int | None = None) -> list[Dialog]:
    """Every conversation of ``path`` (``.parquet``: Parquet, else JSON Lines), at most ``limit`` of them."""
    if fmt not in FORMATS:
        raise DatasetError(f"{path}: unknown dataset format {fmt!r} (known: {', '.join(FORMATS)})")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the dataset: {exc.strerror or exc}") from None
    if size > MAX_DATASET_BYTES:
        raise DatasetError(f"{path}: {size} bytes, more than the {MAX_DATASET_BYTES} a dataset may have")
    rows = _parquet_rows(path) if path.suffix.lower() == ".parquet" else _jsonl_rows(path)
    out: list[Dialog] = []
    for number, obj in rows:
        out.append(_dialog(path, number, obj, fmt))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise DatasetError(f"{path}: the dataset has no conversations")
    return out


@functools.lru_cache(maxsize=8)
def load_dataset(path: str, fmt: str = "auto", limit: int | None = None) -> tuple[Dialog, ...]:
    """``read_dataset``, once per load process (every session of every persona shares the rows)."""
    return tuple(read_dataset(Path(path), fmt, limit))


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the dataset: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise DatasetError(f"{path}: binary data, not JSON Lines (a Parquet file must end in .parquet)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (byte {exc.start}): expected JSON Lines") from None
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError:
            raise _bad(path, number, "not JSON", line) from None


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq  # only for Parquet datasets: the load processes stay light otherwise
    except ImportError:  # pragma: no cover - a dependency of rushhour
        raise DatasetError(f"{path}: reading Parquet needs the 'pyarrow' package") from None
    try:
        names = pq.read_schema(path).names
        columns = [c for c in ("conversations", "messages") if c in names]
        if not columns:
            raise DatasetError(f"{path}: no 'conversations' or 'messages' column (columns: {', '.join(names)})")
        table = pq.read_table(path, columns=columns)
    except DatasetError:
        raise
    except Exception as exc:  # pyarrow raises its own types for a file that is not Parquet
        raise DatasetError(f"{path}: not a readable Parquet file: {str(exc).splitlines()[0][:160]}") from None
    for number, row in enumerate(table.to_pylist(), start=1):
        yield number, {k: v for k, v in row.items() if v is not None}


def _bad(path: Path, row: int, what: str, line: Any = None) -> DatasetError:
    if line is None:
        return DatasetError(f"{path}:{row}: {what}")
    text = line if isinstance(line, str) else json.dumps(line)[:200]
    cut = text.strip()[:60] + ("…" if len(text.strip()) > 60 else "")
    return DatasetError(f"{path}:{row}: {what}: {cut!r}")


def _dialog(path: Path, row: int, obj: Any, fmt: str) -> Dialog:
    """A row as (system, turns); the first problem found is the error."""
    if not isinstance(obj, dict):
        raise _bad(path, row, "a row must be a JSON object with 'conversations' or 'messages'", obj)
    if fmt in ("auto", SHAREGPT) and "conversations" in obj:
        messages = _sharegpt(path, row, obj["conversations"])
    elif fmt in ("auto", OPENAI) and "messages" in obj:
        messages = _openai(path, row, obj["messages"])
    else:
        want = {"auto": "'conversations' (ShareGPT) or 'messages' (OpenAI)", SHAREGPT: "'conversations'",
                OPENAI: "'messages'"}[fmt]
        raise _bad(path, row, f"no {want} list", obj)
    system: list[str] = []
    turns: list[Turn] = []
    user: list[str] = []
    for role, text in messages:
        if role == "system":
            system.append(text)
        elif role == "user":
            user.append(text)  # users who write twice in a row: one turn
        elif user:
            turns.append(Turn("\n".join(user), text))
            user = []
        elif turns and turns[-1].reply is not None:  # the assistant goes on: one longer answer
            turns[-1] = Turn(turns[-1].user, turns[-1].reply + "\n" + text)
        # an answer before any user message has no request to belong to: left out
    if user:
        turns.append(Turn("\n".join(user), None))
    if not turns:
        raise _bad(path, row, "no user message")
    return Dialog(row, "\n".join(system), tuple(turns))


def _sharegpt(path: Path, row: int, value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        raise _bad(path, row, "'conversations' must be a non-empty list of {from, value}")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("from"), str) or not isinstance(m.get("value"), str):
            raise _bad(path, row, f"conversations[{i}] must be {{from: <speaker>, value: <text>}}", m)
        role = _SHAREGPT_ROLES.get(m["from"].lower())
        if role is None:
            raise _bad(path, row, f"conversations[{i}]: unknown speaker {m['from']!r} "
                                  f"(known: {', '.join(sorted(_SHAREGPT_ROLES))})")
        out.append((role, m["value"]))
    return out


def _openai(path: Path, row: int, value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        raise _bad(path, row, "'messages' must be a non-empty list of {role, content}")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(path, row, f"messages[{i}] must be {{role, content}}", m)
        role = _OPENAI_ROLES.get(m["role"])
        if role is None:
            raise _bad(path, row, f"messages[{i}]: role {m['role']!r} is not sent from a dataset "
                                  f"(known: {', '.join(sorted(_OPENAI_ROLES))})")
        out.append((role, _content(path, row, i, m.get("content"))))
    return out


def _content(path: Path, row: int, i: int, content: Any) -> str:
    """A message's text: a string, or the text parts of a list (OpenAI ``[{type: text, text}]``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        parts = [p.get("text") for p in content if p.get("type") == "text"]
        if parts and all(isinstance(p, str) for p in parts):
            return "".join(str(p) for p in parts)
    raise _bad(path, row, f"messages[{i}].content must be text or a list of text parts", content)
