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
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import operator
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rushhour.loadgen.columns import SidecarWriter

try:  # a dependency of rushhour; the module still works (slower) on the stdlib alone
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

SCHEMA_VERSION = 1

# Line kinds that can appear in a shard.
KIND_SHARD = "shard"  # first line of every shard: who wrote it and which anchor it used
KIND_REQUEST = "request"
KIND_TASK = "task"
KIND_HEALTH = "health"
KIND_BREAKER = "breaker"
KIND_EVENT = "event"  # run-level happenings: budget reached, phase change, stop reason

RECORDS_DIR = "records"
# How a first token's time was taken (RequestRecord.first_token_clock): the kernel's receive timestamp of its
# bytes (a late event loop cannot move it), or the moment recv() returned them (a late loop moves it).
FIRST_TOKEN_KERNEL = "kernel"
FIRST_TOKEN_RECV = "recv"
# A load process that cannot start writes one line with this mark to its log (locust.log) and exits;
# the runner finds it there and reports that line as the run's one error.
REASON_TEMPLATE = "template"  # a request not sent: the chat template went over its caps (the input's fault)
START_FAILED_MARK = "rushhour: a load process cannot start:"

# Short error texts: enough to recognise the failure, never a whole hostile body.
MAX_TEXT = 300


# --------------------------------------------------------------------------- credentials


_SECRET_PATTERNS = [
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"sk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"(?i)(?:bearer|basic)\s+[A-Za-z0-9._\-~+/=]{8,}"),
    re.compile(r"eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]+\.?[A-Za-z0-9_\-]*"),  # a JWT
    # name = value, name: value, "name": "value" for anything named like a credential; `tokens` (counts,
    # `max_tokens=4096`) is not a credential and stays readable
    re.compile(
        r"(?i)\b([A-Za-z_\-]*(?:api[_-]?key|key|token(?!s)|secret|passw(?:or)?d|auth(?:orization)?|credential)"
        r"[A-Za-z_\-]*)(\"?\s*[:=]\s*\"?(?:(?:bearer|basic)\s+)?)[^\s\"',}&;]{4,}"
    ),
]
_KEY_PREFIX = re.compile(r"^(?:(?:bearer|basic)\s+)?(?:sk-ant-(?:api\d+-)?|sk-(?:proj-|svcacct-)?)?", re.I)
ECHO_MIN = 12  # a run of this many characters of a registered key is redacted wherever it shows up
_registered_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str) -> None:
    """Remember a credential value so that ``redact`` removes it (whole, without its prefix, or in part)."""
    if value and len(value) >= 4:
        core = _KEY_PREFIX.sub("", value)
        with _secrets_lock:
            _registered_secrets.add(value)
            if core != value and len(core) >= 4:
                _registered_secrets.add(core)
            _clean_texts.clear()  # a remembered sanitised text may hold the new secret


def fingerprint(secret: str) -> str:
    """A short, non-reversible tag that tells keys apart in a report without revealing them."""
    if not secret:
        return ""
    return "fp:" + hashlib.sha256(secret.encode()).hexdigest()[:8]


def _echo_spans(text: str, secret: str) -> list[tuple[int, int]]:
    """Where ``secret`` or any ``ECHO_MIN`` characters of it appear in ``text`` (a partial echo)."""
    spans: list[tuple[int, int]] = []
    size = min(ECHO_MIN, len(secret))
    seen: set[str] = set()
    for i in range(len(secret) - size + 1):
        piece = secret[i : i + size]
        if piece in seen:
            continue
        seen.add(piece)
        at = text.find(piece)
        while at >= 0:
            spans.append((at, at + size))
            at = text.find(piece, at + 1)
    return spans


def _cut_spans(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in sorted(spans):
        if end <= pos:
            continue
        if start > pos:
            out.append(text[pos:start])
            out.append("[redacted]")
        elif not out or out[-1] != "[redacted]":
            out.append("[redacted]")
        pos = max(pos, end)
    out.append(text[pos:])
    return "".join(out)


def redact(text: str | None) -> str | None:
    """Strip registered credentials (whole or any 12 characters of one) and anything shaped like a key."""
    if text is None:
        return None
    with _secrets_lock:
        secrets = list(_registered_secrets)
    spans = [span for secret in secrets for span in _echo_spans(text, secret)]
    if spans:
        text = _cut_spans(text, spans)
    for pattern in _SECRET_PATTERNS:
        if pattern.groups >= 2:
            text = pattern.sub(lambda m: m.group(1) + m.group(2) + "[redacted]", text)
        else:
            text = pattern.sub("[redacted]", text)
    return text


def strip_userinfo(url: str) -> str:
    """``http://user:secret@host/x`` -> ``http://host/x``: a password in a URL is a credential too."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", url)


def short_text(text: str | bytes | None, limit: int = MAX_TEXT) -> str | None:
    """Sanitise a server-supplied text: decode, drop control characters, redact, cut."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text[: limit * 4].decode("utf-8", errors="replace")
    text = "".join(ch if ch.isprintable() else " " for ch in text[: limit * 4]).strip()
    text = redact(text) or ""
    return text[:limit]


def error_summary(obj: Any) -> tuple[str | None, str | None]:
    """(reason, short text) from an error object in any of the dialects' shapes."""
    if not isinstance(obj, dict):
        return None, short_text(str(obj))
    err = obj.get("error", obj)
    if isinstance(err, str):
        return None, short_text(err)
    if not isinstance(err, dict):
        return None, short_text(str(err))
    code = err.get("code")
    etype = err.get("type")
    reason: str | None = None
    if isinstance(code, str) and code:
        reason = code
    elif isinstance(etype, str) and etype:
        reason = etype
    elif code is not None:
        reason = str(code)
    message = err.get("message") or etype or code or "error"
    return (short_text(reason) if reason else None), short_text(str(message))


# --------------------------------------------------------------------------- line kinds


@dataclass(slots=True)
class RequestRecord:
    """One request attempt. Every retry and every fallback switch is its own record."""

    run_id: str
    seq: int
    request_id: str  # sent as x-request-id; the testbed ledger is keyed by it
    logical_id: str  # shared by all attempts (retries, fallbacks) of one logical request
    tier: str
    tenant: str
    persona: str
    session_id: str = ""
    task_id: str = ""
    step: int = 0
    fanout_index: int = 0
    parent_id: str = ""  # a sub-agent's request: the logical id of the call that spawned its swarm
    # the priority control (docs/audit.md): a twin is an equal-priority copy of logical request ``twin_of``
    twin_of: str = ""
    control: bool = False
    attempt: int = 1
    retry_reason: str | None = None  # why this attempt exists (the previous attempt's outcome)
    route: str = "primary"
    endpoint: str = ""
    model: str = ""
    dialect: str = ""
    stream: bool = True
    key_fingerprint: str = ""
    prompt_bytes: int = 0
    # timing (ns from the run's monotonic anchor; None = never happened)
    intended_ns: int | None = None
    sent_ns: int | None = None
    headers_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    done_ns: int | None = None
    tokens: int = 0  # content events seen in the stream
    itl_max_ns: int | None = None
    itl_mean_ns: int | None = None
    token_ns: list[int] | None = None  # per-token times, only when the scenario asks
    # how first_token_ns was taken: FIRST_TOKEN_KERNEL or FIRST_TOKEN_RECV (None: no first token, or an older
    # writer); when the event loop read those bytes (ns from the anchor: minus first_token_ns, how long they
    # waited in the socket); and how many tokens that one read held (more than one: the loop read late, and the
    # kernel's stamp of a read is its last segment's, so it may be a later token's arrival)
    first_token_clock: str | None = None
    first_token_read_ns: int | None = None
    first_token_batch: int | None = None
    # outcome facts
    status: int = 0  # 0 = no HTTP response at all
    reason: str | None = None  # dropped-reason header, error code/type
    error: str | None = None  # short sanitised text
    in_band_error: str | None = None  # an error event inside a 200 stream
    complete: bool = False  # saw the end marker
    cancelled: bool = False  # the generator stopped before the attempt ended
    not_sent: bool = False  # the schedule wanted it sent but no slot was free
    abandoned: bool = False  # the user gave up (no first token within its patience) and closed the connection
    client_timeout: bool = False  # the client's own deadline passed
    transport_error: bool = False  # connection refused/reset, malformed HTTP
    # The request was first written into a reused keep-alive connection that the server had closed
    # while idle (it died before any response byte, so the server never saw it) and was sent again,
    # once, on a fresh connection; every other fact is the fresh connection's.
    reconnected: bool = False
    retry_after_s: float | None = None
    prompt_tokens: int | None = None  # as the server reported them (usage)
    prompt_tokens_intended: int | None = None  # as rushhour built the prompt
    prompt_tokens_exact: bool = False  # the intended count came from the scenario's tokenizer (else an estimate)
    max_tokens: int | None = None  # the output length asked for
    output_pinned: bool = False  # the body asked the server to produce exactly max_tokens (min_tokens + ignore_eos)
    output_tokens: int | None = None
    cached_tokens: int | None = None
    service_tier: str | None = None
    tools_offered: bool = False  # the body offered the model function tools (an agent's request)
    tool_call: str | None = None  # the name of the tool the answer called (only requests that offered tools)
    # the server's own timing, as it reported it (stacks/timing.py; None = not reported): vLLM's ``metrics``
    # object (--enable-per-request-metrics: engine queue, prefill …), LiteLLM's timing headers, the
    # testbed's gateway queue header. Milliseconds as floats, bounded; never computed here.
    metrics_queue_time_ms: float | None = None
    metrics_time_to_first_token_ms: float | None = None
    metrics_generation_time_ms: float | None = None
    metrics_mean_itl_ms: float | None = None
    metrics_tokens_per_second: float | None = None
    litellm_response_duration_ms: float | None = None
    litellm_overhead_duration_ms: float | None = None
    litellm_timing_llm_api_ms: float | None = None
    litellm_timing_pre_processing_ms: float | None = None
    gateway_queue_ms: float | None = None
    kind: str = KIND_REQUEST
    schema: int = SCHEMA_VERSION


@dataclass(slots=True)
class TaskRecord:
    """An agent task or a chat session: start, deadline, end and how it ended."""

    run_id: str
    seq: int
    task_id: str
    persona: str
    tier: str
    tenant: str
    session_id: str = ""
    start_ns: int = 0
    deadline_ns: int | None = None
    end_ns: int | None = None
    outcome: str = ""  # completed | failed | deadline_missed | cancelled | abandoned (a chat user gave up)
    steps: int = 0
    calls: int = 0
    calls_failed: int = 0
    first_failure: str | None = None
    ideal_ns: int | None = None  # makespan the task would have had on an idle stack, if known
    kind: str = KIND_TASK
    schema: int = SCHEMA_VERSION


@dataclass(slots=True)
class HealthRecord:
    """The generator's own health, sampled every second: is it fit to judge latency?"""

    run_id: str
    seq: int
    ts_ns: int
    loop_lag_ns: int
    cpu_percent: float
    in_flight: int = 0
    not_sent_total: int = 0
    sent_total: int = 0
    # who and where: the process (its PID, its index among the run's load processes) and the host's 1-minute
    # load average (None where the OS has none): what a verdict names when this process lagged
    pid: int = 0
    worker_index: int = 0
    workers: int = 1
    load1: float | None = None
    cpus: int = 0  # the cores this process may run on (its affinity)
    kind: str = KIND_HEALTH
    schema: int = SCHEMA_VERSION


@dataclass(slots=True)
class BreakerRecord:
    """A circuit breaker changed state on a route."""

    run_id: str
    seq: int
    ts_ns: int
    route: str
    state: str  # closed | open | half_open
    previous: str
    cause: str | None = None
    kind: str = KIND_BREAKER
    schema: int = SCHEMA_VERSION


@dataclass(slots=True)
class EventRecord:
    """A run-level happening (phase change, budget reached, stop requested)."""

    run_id: str
    seq: int
    ts_ns: int
    name: str
    detail: dict[str, Any] = field(default_factory=dict)
    kind: str = KIND_EVENT
    schema: int = SCHEMA_VERSION


Record = RequestRecord | TaskRecord | HealthRecord | BreakerRecord | EventRecord

# Texts that can carry what a server sent (a hostile server may echo a key or send megabytes): each is
# redacted and cut to MAX_TEXT on the way out, whatever the code that filled it did.
_TEXT_FIELDS = ("reason", "error", "in_band_error", "retry_reason", "first_failure", "cause", "service_tier")
# Per record class: its field names, a getter of all their values, the indexes of the free texts, of the
# endpoint and of token_ns.
_LAYOUTS: dict[type, tuple[tuple[str, ...], Any, tuple[int, ...], int, int]] = {}
# short_text of a free text, remembered: a run writes the same few error texts by the hundred thousand
# (a rejection storm). Forgotten when a secret is registered (redact's answer may change then).
_clean_texts: dict[str, str | None] = {}
_CLEAN_TEXTS_MAX = 4096
_PLAIN = frozenset({str, int, bool, type(None)})  # values orjson writes exactly as json.dumps does


def _layout(cls: type) -> tuple[tuple[str, ...], Any, tuple[int, ...], int, int]:
    names = tuple(f.name for f in dataclasses.fields(cls))
    texts = tuple(i for i, n in enumerate(names) if n in _TEXT_FIELDS)
    spec = _LAYOUTS[cls] = (names, operator.attrgetter(*names), texts,
                            names.index("endpoint") if "endpoint" in names else -1,
                            names.index("token_ns") if "token_ns" in names else -1)
    return spec


def _clean(text: str) -> str | None:
    out = _clean_texts.get(text, _MISSING)
    if out is _MISSING:
        if len(_clean_texts) >= _CLEAN_TEXTS_MAX:
            _clean_texts.clear()
        out = _clean_texts[text] = short_text(text)
    return out  # type: ignore[return-value]


_MISSING = object()


def _same_as_json(values: list[Any]) -> bool:
    """True when orjson writes these values byte for byte as ``json.dumps(ensure_ascii=False)`` does: strings
    (same escapes, checked over every code point), ints, bools, None, lists of those, and floats that both
    write in plain decimal (orjson writes 1e-05 as 0.00001; NaN as null). Anything else takes json.dumps."""
    kinds = set(map(type, values))
    if kinds <= _PLAIN:
        return True
    for v in values:
        t = type(v)
        if t is float:
            if not (v == 0.0 or 1e-4 <= abs(v) < 1e16):  # NaN and infinities fail both tests
                return False
        elif t is list:
            if not _same_as_json(v):
                return False
        elif t not in _PLAIN:
            return False
    return True


def to_json_line(record: Record) -> bytes:
    """Serialise one record; every free text is redacted and cut on the way out.

    The line is ``json.dumps(fields, separators=(",", ":"), ensure_ascii=False)``; orjson writes it when the
    values are ones it writes byte for byte alike (tests/loadgen/test_record_line.py), ~20× faster."""
    return record_line(record)[1]


def record_line(record: Record) -> tuple[dict[str, Any], bytes]:
    """A record's fields as written (texts redacted and cut, a URL without its user part) and its line."""
    cls = type(record)
    names, get, texts, endpoint, token_ns = _LAYOUTS.get(cls) or _layout(cls)
    values = list(get(record))
    for i in texts:
        value = values[i]
        if isinstance(value, str):
            values[i] = _clean(value)
    if endpoint >= 0 and isinstance(values[endpoint], str) and "@" in values[endpoint]:
        values[endpoint] = strip_userinfo(values[endpoint])
    data = dict(zip(names, values, strict=True))
    if token_ns >= 0 and values[token_ns] is None:
        del data["token_ns"]
    if orjson is not None and _same_as_json(values):
        try:
            return data, orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
        except (orjson.JSONEncodeError, TypeError):  # an int beyond 64 bits: json.dumps writes it
            pass
    return data, json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


# --------------------------------------------------------------------------- anchor and manifest


@dataclass(slots=True)
class Anchor:
    """Pairs one monotonic instant with one wall-clock instant, taken together."""

    mono_ns: int
    wall_ns: int

    @classmethod
    def now(cls) -> Anchor:
        return cls(mono_ns=time.monotonic_ns(), wall_ns=time.time_ns())

    @classmethod
    def of_run(cls, mono_ns: int, wall_ns: int, host: str, here: str) -> Anchor:
        """The run's anchor as seen by a process on host ``here``: the runner's own on its host (``host``
        empty or equal); elsewhere the monotonic clock is unrelated, so it is lined up through the wall clock."""
        if mono_ns and (not host or host == here):
            return cls(mono_ns, wall_ns)
        now = cls.now()
        return cls(now.mono_ns - (now.wall_ns - wall_ns), wall_ns)

    def since(self, mono_ns: int | None = None) -> int:
        """Nanoseconds from the anchor to ``mono_ns`` (default: now)."""
        return (time.monotonic_ns() if mono_ns is None else mono_ns) - self.mono_ns


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_disk_full(exc: BaseException) -> bool:
    """An ``OSError`` that means the storage is full (no space, quota, file too large)."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


# --------------------------------------------------------------------------- writer


class ShardWriter:
    """Append-only JSONL shard for one process.

    Lines are buffered briefly and handed to the kernel at least every ``flush_interval_s`` or
    ``flush_lines`` lines, so a ``kill -9`` loses at most that window; ``close`` fsyncs. Writes
    are serialised by a lock, so greenlets and threads may share one writer.

    ``columns`` (default on): the lines handed to the kernel are also kept as typed Arrow batches in the
    shard's sidecar (``loadgen/columns.py``), which spares the audit the JSON parse of the lines it covers.
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
            from rushhour.loadgen.columns import SidecarWriter  # pyarrow: only a writer that keeps a sidecar loads it

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


# --------------------------------------------------------------------------- reader


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


