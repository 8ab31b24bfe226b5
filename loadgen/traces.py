"""Trace readers (pure): Azure LLM CSV and Mooncake JSONL rows → (time, prompt tokens, output tokens, blocks)."""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rushhour.loadgen.bounded_json import JsonShapeError, check_depth
from rushhour.loadgen.trace_error import TraceError as TraceError  # its home; the readers import it from here
from rushhour.scenarios.kinds import every_kind

MOONCAKE_BLOCK_TOKENS = 512
MAX_TRACE_BYTES = 2 << 30  # every load process reads the whole trace
MAX_TRACE_LINE = 1 << 20  # a Mooncake line with a 2M-token prompt's block ids is ~40 kB
MAX_HASH_IDS = 2_000_000 // MOONCAKE_BLOCK_TOKENS + 1  # the blocks of the largest prompt (MAX_TOKENS)
DATASET = "dataset"  # a TraceRef's format prefix for a persona's conversation dataset (loadgen/datasets.py)
AGENT = "agent"  # a TraceRef's format prefix for an agent trace's sessions (loadgen/agent_traces.py)
# the format prefix of the trace file a persona kind's ``trace`` names, by its ``kind`` (None: it names none)
TRACE_FORMATS: Mapping[str, str | None] = every_kind(
    {"chat": None, "agent_swarm": None, "trace_replay": "", "agent_trace": f"{AGENT}:"}, __name__)


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: seconds from the trace's first row, sizes, and prefix block ids."""

    index: int
    t_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def _text(path: Path) -> str:
    """A trace's text; binary data, another encoding or an unreadable file is a ``TraceError``."""
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise TraceError(f"{path}: {size:,} bytes, more than the {MAX_TRACE_BYTES:,} a trace may have")
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise TraceError(f"{path}: binary data, not a trace (expected Azure CSV or Mooncake JSONL text)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text (byte {exc.start}): expected Azure CSV or Mooncake JSONL") from None


def detect_format(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            raw = handle.read(4096)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise TraceError(f"{path}: binary data, not a trace (expected Azure CSV or Mooncake JSONL text)")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)  # a cut last character is fine
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text (byte {exc.start}): expected Azure CSV or Mooncake JSONL") from None
    head = raw[:256].lstrip()
    if head.startswith(b"{"):
        return "mooncake"
    if head.upper().startswith(b"TIMESTAMP"):
        return "azure"
    raise TraceError(f"{path}: cannot tell the trace format (expected Azure CSV or Mooncake JSONL)")


def _bad_row(path: Path, lineno: int, what: str, line: str) -> TraceError:
    cut = line.strip()[:60] + ("…" if len(line.strip()) > 60 else "")
    return TraceError(f"{path}:{lineno}: {what}: {cut!r}")


def _json_line(line: str) -> Any:
    """One JSON line of a trace, its length and nesting checked before it is parsed (``JsonShapeError``)."""
    if len(line) > MAX_TRACE_LINE:
        raise JsonShapeError(f"a line of {len(line):,} characters, more than the {MAX_TRACE_LINE:,} a trace's may be")
    check_depth(line)
    try:
        return json.loads(line)
    except RecursionError:  # pragma: no cover - check_depth refuses any nesting that could get here
        raise ValueError("nested too deep") from None


def _count(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("a negative token count")
    return number


def _azure_time(text: str) -> float:
    # 7-digit fractions ("18:15:46.6805900") are more than datetime's 6: cut to microseconds
    stamp = text.strip()
    if "." in stamp:
        head, frac = stamp.split(".", 1)
        stamp = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(stamp).timestamp()


def read_azure(path: Path) -> list[TraceRow]:
    """``TIMESTAMP,ContextTokens,GeneratedTokens`` with CRLF and possibly no final newline."""
    raw = _text(path)
    numbered = [(i + 1, line) for i, line in enumerate(raw.replace("\r\n", "\n").replace("\r", "\n").split("\n"))]
    lines = [(n, line) for n, line in numbered if line.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0][1].split(",")]
    try:
        i_ts, i_in, i_out = header.index("TIMESTAMP"), header.index("ContextTokens"), header.index("GeneratedTokens")
    except ValueError:
        raise TraceError(
            f"{path}: expected columns TIMESTAMP,ContextTokens,GeneratedTokens, got {len(header)} other column(s)"
        ) from None
    rows: list[TraceRow] = []
    t0: float | None = None
    for n, (lineno, line) in enumerate(lines[1:]):
        cols = line.split(",")
        try:
            ts = _azure_time(cols[i_ts])
            row = TraceRow(n, 0.0, _count(cols[i_in]), _count(cols[i_out]))
        except (ValueError, IndexError, OverflowError):
            raise _bad_row(path, lineno, "not an Azure trace row (TIMESTAMP,ContextTokens,GeneratedTokens)",
                           line) from None
        t0 = ts if t0 is None else t0
        rows.append(TraceRow(n, ts - t0, row.prompt_tokens, row.output_tokens))
    return rows


def read_mooncake(path: Path) -> list[TraceRow]:
    """JSONL ``{timestamp (ms), input_length, output_length, hash_ids}``."""
    rows: list[TraceRow] = []
    t0: float | None = None
    for n, line in enumerate(_text(path).split("\n")):
        if not line.strip():
            continue
        try:
            obj = _json_line(line)
            ts = float(obj["timestamp"]) / 1000.0
            if ts != ts or ts in (float("inf"), float("-inf")):
                raise ValueError("timestamp is not finite")
            row = TraceRow(n, 0.0, _count(obj["input_length"]), _count(obj["output_length"]),
                           tuple(int(h) for h in obj.get("hash_ids", ())))
        except JsonShapeError as exc:
            raise _bad_row(path, n + 1, str(exc), line) from None
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            raise _bad_row(path, n + 1, "not a Mooncake trace line ({timestamp, input_length, output_length})",
                           line) from None
        if len(row.hash_ids) > MAX_HASH_IDS:
            raise _bad_row(path, n + 1, f"{len(row.hash_ids):,} hash_ids, more than the {MAX_HASH_IDS:,} blocks of "
                                        "the largest prompt", line)
        t0 = ts if t0 is None else t0
        rows.append(TraceRow(n, ts - t0, row.prompt_tokens, row.output_tokens, row.hash_ids))
    return rows


def read_trace(path: Path, fmt: str = "auto") -> list[TraceRow]:
    """Every row of a trace; garbage, binary data or a bad row is a one-line ``TraceError``."""
    fmt = detect_format(path) if fmt == "auto" else fmt
    return read_azure(path) if fmt == "azure" else read_mooncake(path)


# --------------------------------------------------------------------------- which files a scenario may read


@dataclass(frozen=True, slots=True)
class TraceRef:
    """A trace a scenario names: a replayed trace (``column`` None) or an empirical distribution's column."""

    field: str
    trace: str
    fmt: str = "auto"
    column: str | None = None


def trace_refs(data: Any, where: str = "") -> list[TraceRef]:
    """Every trace a scenario names; ``data`` is the scenario as plain data (``model_dump(mode="json")``)."""
    found: list[TraceRef] = []
    if isinstance(data, dict):
        field = f"{where}.trace".lstrip(".")
        prefix = TRACE_FORMATS.get(str(data.get("kind"))) if isinstance(data.get("trace"), str) else None
        if prefix is not None:
            found.append(TraceRef(field, data["trace"], f"{prefix}{data.get('format') or 'auto'}"))
        elif isinstance(data.get("trace"), str) and data.get("dist") == "empirical":
            found.append(TraceRef(field, data["trace"], column=str(data.get("column"))))
        dataset = data.get("dataset")
        if isinstance(dataset, dict) and isinstance(dataset.get("path"), str):
            fmt = f"{DATASET}:{dataset.get('format') or 'auto'}"
            found.append(TraceRef(f"{where}.dataset.path".lstrip("."), dataset["path"], fmt))
        for key, value in data.items():
            found += trace_refs(value, f"{where}.{key}")
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += trace_refs(value, f"{where}.{i}")
    return found


def _under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def locate_trace(trace: str, scenario_dir: Path | None, allowed: Sequence[Path] = ()) -> Path:
    """The file a trace name means, if it lies in the scenario's folder, the shipped traces or ``allowed``.

    A relative name is looked up next to the scenario, in each allowed folder, in the working directory,
    then among the shipped traces. Symbolic links are followed before the check, so a link next to the
    scenario cannot point elsewhere. Anything else is a ``TraceError`` naming ``--allow-path``.
    """
    from rushhour.scenarios.distributions import BUNDLED_DATASETS, BUNDLED_TRACES

    shipped = [BUNDLED_TRACES, BUNDLED_DATASETS]
    roots = [r.resolve() for r in ([scenario_dir] if scenario_dir else []) + [*allowed, *shipped]]
    name = Path(os.path.expanduser(trace))
    bases = [] if name.is_absolute() else [*roots[:-2], Path.cwd(), *shipped]
    candidates = [name] if name.is_absolute() else [base / name for base in bases]
    found = next((c for c in candidates if c.exists()), None)
    if found is None:
        from rushhour.scenarios.names import did_you_mean

        near = "" if name.is_absolute() else did_you_mean(
            name.name, sorted(p.name for folder in shipped for p in folder.iterdir() if p.is_file()), cutoff=0.5)
        raise TraceError(f"trace file {trace!r} not found" + (f" — {near}" if near else "")
                         + f" (looked in {', '.join(str(b) for b in bases) or trace})")
    path = found.resolve()
    if not any(_under(path, root) for root in roots):
        raise TraceError(
            f"trace {trace!r} is {path}, outside the scenario's folder and the shipped traces: "
            f"to read it anyway, pass --allow-path {path.parent}"
        )
    if not path.is_file():
        raise TraceError(f"trace {trace!r} is {path}, not a file")
    return path


def check_trace_file(path: Path, ref: TraceRef) -> None:
    """Read a trace once, as the load processes will: garbage is a ``TraceError`` now, not mid-run."""
    if ref.fmt.startswith(DATASET + ":"):
        from rushhour.loadgen.datasets import read_dataset

        read_dataset(path, ref.fmt.split(":", 1)[1])
        return
    if ref.fmt.startswith(AGENT + ":"):
        from rushhour.loadgen.agent_traces import read_agent_trace

        read_agent_trace(path, ref.fmt.split(":", 1)[1])
        return
    if ref.column is None:
        if not read_trace(path, ref.fmt):
            raise TraceError(f"{path}: the trace has no rows")
        return
    text = _text(path)
    if path.suffix == ".csv":
        header = [h.strip() for h in text.split("\n", 1)[0].split(",")]
        if ref.column not in header:
            raise TraceError(f"{path}: no column {ref.column!r} in its first line")
        return
    for n, line in enumerate(text.split("\n")):
        if line.strip():
            try:
                obj = _json_line(line)
                if not isinstance(obj, dict):
                    raise ValueError("not an object")
                if ref.column in obj:
                    float(obj[ref.column])
            except JsonShapeError as exc:
                raise _bad_row(path, n + 1, str(exc), line) from None
            except (ValueError, TypeError):
                raise _bad_row(path, n + 1, "not a JSON object with a number in that column", line) from None


def localise_traces(scenario: Any, scenario_dir: Path | None, allowed: Sequence[Path], where: str) -> Any:
    """The scenario with every trace checked (place and contents) and named by its absolute path.

    The load processes run elsewhere (another working directory, another machine's checkout): an
    absolute path means they read exactly the file checked here. Problems raise one ``ScenarioError``.
    """
    from rushhour.scenarios.loader import Problem, ScenarioError, located

    data = scenario.model_dump(mode="json")
    refs = trace_refs(data)
    if not refs:
        return scenario
    problems, paths = [], {}
    for ref in refs:
        try:
            path = locate_trace(ref.trace, scenario_dir, allowed)
            check_trace_file(path, ref)
            paths[ref.trace] = str(path)
        except TraceError as exc:
            problems.append(Problem(ref.field, None, str(exc)))
    if problems:
        raise ScenarioError(where, located(where, problems))
    return type(scenario).model_validate(_replace_traces(data, paths))


def _replace_traces(data: Any, paths: dict[str, str]) -> Any:
    if isinstance(data, dict):
        out = {k: _replace_traces(v, paths) for k, v in data.items()}
        if isinstance(out.get("trace"), str) and out["trace"] in paths:
            out["trace"] = paths[out["trace"]]
        dataset = out.get("dataset")
        if isinstance(dataset, dict) and isinstance(dataset.get("path"), str) and dataset["path"] in paths:
            out["dataset"] = {**dataset, "path": paths[dataset["path"]]}
        return out
    if isinstance(data, list):
        return [_replace_traces(v, paths) for v in data]
    return data


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
