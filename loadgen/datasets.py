"""Conversation datasets (pure): ShareGPT ``conversations`` or OpenAI ``messages`` rows, JSONL or Parquet.

Each row becomes a ``Dialog``: the row's system text and its turns (the user's text and the dataset's
own answer, whose length sizes the output when the scenario asks). Anything a load process could not
send is a ``DatasetError`` of one line naming the file and the row, raised when the scenario is checked,
before a run folder exists. Parquet needs pyarrow, imported only when a Parquet file is read.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rushhour.loadgen.bounded_json import JsonShapeError, check_depth
from rushhour.loadgen.token_size import BYTES_PER_TOKEN
from rushhour.loadgen.trace_error import TraceError
from rushhour.scenarios.model import MAX_TOKENS

SHAREGPT = "sharegpt"
OPENAI = "openai"
FORMATS = ("auto", SHAREGPT, OPENAI)
# ShareGPT speakers (ShareGPT itself, Vicuna/FastChat, Bard and Gemini-style exports)
_SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                   "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant", "model": "assistant"}
_OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_DATASET_BYTES = 2 << 30  # every load process holds the rows in memory: the file, and its text once decoded
# A row is one conversation; its last turn's prompt carries all of it, so its text is held to one prompt's limit
# (MAX_TOKENS, at the BYTES_PER_TOKEN the prompts are sized by when there is no tokenizer): 8 MB of text.
MAX_ROW_TEXT_BYTES = MAX_TOKENS * BYTES_PER_TOKEN
# a JSON line may spend up to this much on quotes, keys and escapes around its text before it is read at all
MAX_LINE_BYTES = 2 * MAX_ROW_TEXT_BYTES + (1 << 20)
PARQUET_BATCH_ROWS = 1024  # rows turned into Python objects at once (the row check runs between batches)


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


def check_tokens(path: str, fmt: str, limit: int | None, count: Callable[[str], int]) -> None:
    """With the scenario's tokenizer, rows held to ``MAX_TOKENS`` exactly: ``DatasetError`` naming file and row.

    Only a row of more than ``MAX_TOKENS`` bytes is counted: a token is at least one byte of text, so a
    shorter row cannot be over (and counting every row would tokenize the whole dataset at every check).
    """
    for dialog in load_dataset(path, fmt, limit):
        texts = [dialog.system, *(t.user for t in dialog.turns), *(t.reply or "" for t in dialog.turns)]
        if sum(len(t.encode()) for t in texts) <= MAX_TOKENS:
            continue
        tokens = sum(count(t) for t in texts if t)
        if tokens > MAX_TOKENS:
            raise DatasetError(f"{path}:{dialog.row}: {tokens:,} tokens of text (the scenario's tokenizer): more "
                               f"than one prompt may hold ({MAX_TOKENS:,} tokens; the limit)")


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """Line by line, each line read with a cap: a 100 MB line is refused after ``MAX_LINE_BYTES``, not held."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the dataset: {exc.strerror or exc}") from None
    offset = 0
    with handle:
        if b"\x00" in handle.read(1 << 16):  # a binary file is named as such, whatever its first line is
            raise DatasetError(f"{path}: binary data, not JSON Lines (a Parquet file must end in .parquet)")
        handle.seek(0)
        for number in range(1, 1 << 62):
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise DatasetError(f"{path}: cannot read the dataset: {exc.strerror or exc}") from None
            if not raw:
                return
            if len(raw) > MAX_LINE_BYTES:
                raise DatasetError(f"{path}:{number}: the row is longer than {MAX_LINE_BYTES:,} bytes (its text may "
                                   f"be {MAX_ROW_TEXT_BYTES:,} bytes, {MAX_TOKENS:,} tokens: the limit of a prompt)")
            if b"\x00" in raw:
                raise DatasetError(f"{path}: binary data, not JSON Lines (a Parquet file must end in .parquet)")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(f"{path}: not UTF-8 text (byte {offset + exc.start}): expected JSON Lines") from None
            offset += len(raw)
            if not line.strip():
                continue
            try:
                check_depth(line)
                yield number, json.loads(line)
            except JsonShapeError as exc:
                raise _bad(path, number, str(exc)) from None
            except (ValueError, RecursionError):
                raise _bad(path, number, "not JSON", line) from None


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """Row group by row group, within a budget of decoded text checked before each group is turned into rows.

    A few kilobytes of Parquet can decode to gigabytes (compression, a dictionary entry repeated): the
    footer's uncompressed sizes are checked first, then each group is read with its text columns as
    dictionaries (as stored) and its decoded size summed from them, before any row is expanded.
    """
    try:
        import pyarrow.parquet as pq  # only for Parquet datasets: the load processes stay light otherwise
    except ImportError:  # pragma: no cover - a dependency of rushhour
        raise DatasetError(f"{path}: reading Parquet needs the 'pyarrow' package") from None
    try:
        meta = pq.read_metadata(path)
        names = meta.schema.to_arrow_schema().names
        columns = [c for c in ("conversations", "messages") if c in names]
        if not columns:
            raise DatasetError(f"{path}: no 'conversations' or 'messages' column (columns: {', '.join(names)})")
        leaves = [meta.schema.column(j) for j in range(meta.num_columns)]
        wanted = [j for j, c in enumerate(leaves) if c.path.split(".", 1)[0] in columns]
        texts = [leaves[j].path for j in wanted if leaves[j].physical_type == "BYTE_ARRAY"]
        _check_stored_sizes(path, meta, wanted)
        handle = pq.ParquetFile(path, read_dictionary=texts)
    except DatasetError:
        raise
    except Exception as exc:  # pyarrow raises its own types for a file that is not Parquet
        raise DatasetError(f"{path}: not a readable Parquet file: {_first_line(exc)}") from None
    number, decoded = 0, 0
    for group in range(meta.num_row_groups):
        try:
            table = handle.read_row_group(group, columns=columns)
        except Exception as exc:
            raise DatasetError(f"{path}: row group {group}: not readable: {_first_line(exc)}") from None
        decoded += _decoded_bytes(table)
        if decoded > MAX_DATASET_BYTES:
            raise DatasetError(f"{path}: row group {group} (rows {number + 1}–{number + table.num_rows}): the text "
                               f"decodes to more than the {MAX_DATASET_BYTES:,} bytes a dataset may hold")
        for batch in table.to_batches(max_chunksize=PARQUET_BATCH_ROWS):
            for row in batch.to_pylist():  # dictionary columns come back as their values
                number += 1
                yield number, {k: v for k, v in row.items() if v is not None}


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160]


def _check_stored_sizes(path: Path, meta: Any, wanted: list[int]) -> None:
    """The footer's uncompressed sizes of the columns read, summed group by group, within the budget."""
    total = 0
    for group in range(meta.num_row_groups):
        chunks = meta.row_group(group)
        total += sum(max(0, chunks.column(j).total_uncompressed_size) for j in wanted)
        if total > MAX_DATASET_BYTES:
            raise DatasetError(f"{path}: row group {group}: the columns read decompress to more than the "
                               f"{MAX_DATASET_BYTES:,} bytes a dataset may hold (a decompression bomb?)")


def _decoded_bytes(table: Any) -> int:
    """Bytes the table's text takes once every dictionary index is expanded (computed, not expanded)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = 0
    stack = [column for column in table.columns]
    while stack:  # nested lists and structs: walked with a stack, flattened chunk by chunk
        item = stack.pop()
        chunks = item.chunks if isinstance(item, pa.ChunkedArray) else [item]
        for chunk in chunks:
            kind = chunk.type
            if pa.types.is_dictionary(kind):
                lengths = pc.binary_length(chunk.dictionary)
                total += int(pc.sum(pc.take(lengths, chunk.indices.drop_null())).as_py() or 0)
            elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
                stack.append(chunk.flatten())
            elif pa.types.is_struct(kind):
                stack.extend(chunk.flatten())
            else:
                total += chunk.nbytes
    return total


def _bad(path: Path, row: int, what: str, line: Any = None) -> DatasetError:
    if line is None:
        return DatasetError(f"{path}:{row}: {what}")
    text = line if isinstance(line, str) else json.dumps(line, default=_shown)[:200]
    cut = text.strip()[:60] + ("…" if len(text.strip()) > 60 else "")
    return DatasetError(f"{path}:{row}: {what}: {cut!r}")


def _shown(value: Any) -> str:
    """A value JSON cannot write (bytes, a date from Parquet) as its type and a short repr."""
    return f"<{type(value).__name__}> {value!r:.40}"


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
    size = sum(len(text.encode()) for _, text in messages)
    if size > MAX_ROW_TEXT_BYTES:
        raise _bad(path, row, f"{size:,} bytes of text (≈ {-(-size // BYTES_PER_TOKEN):,} tokens): more than one "
                              f"prompt may hold ({MAX_TOKENS:,} tokens, {MAX_ROW_TEXT_BYTES:,} bytes; the limit)")
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
