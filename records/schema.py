"""The record's line kinds, their fields and their one serialisation (stdlib; orjson writes the same bytes)."""

from __future__ import annotations

import dataclasses
import errno
import json
import operator
import time
from dataclasses import dataclass, field
from typing import Any

from rushhour.records.redact import clean_text, strip_userinfo

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
_PLAIN = frozenset({str, int, bool, type(None)})  # values orjson writes exactly as json.dumps does


def _layout(cls: type) -> tuple[tuple[str, ...], Any, tuple[int, ...], int, int]:
    names = tuple(f.name for f in dataclasses.fields(cls))
    texts = tuple(i for i, n in enumerate(names) if n in _TEXT_FIELDS)
    spec = _LAYOUTS[cls] = (names, operator.attrgetter(*names), texts,
                            names.index("endpoint") if "endpoint" in names else -1,
                            names.index("token_ns") if "token_ns" in names else -1)
    return spec


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
            values[i] = clean_text(value)
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
