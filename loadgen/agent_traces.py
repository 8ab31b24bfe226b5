"""Agent-trace reader (pure): Weka agentic sessions (JSON Lines) → trees of calls with sub-agents, tool gaps, prefixes.

The format is the one SemiAnalysis publishes as ``cc-traces-weka-*`` (Claude Code sessions captured by Weka's
KV-cache tester) and kubernetes-sigs/inference-perf replays (``weka_trace_replay_datagen.py``, Apache-2.0):
one session per line, ``{id, block_size, tool_tokens, system_tokens, requests}``, where a request is a model
call ``{t, type: "n"|"s", in, out, hash_ids, api_time}`` (seconds from the session's start, prompt and output
tokens, the prompt's block hashes, the call's own duration) or a sub-agent ``{t, type: "subagent", agent_id,
subagent_type, duration_ms, requests: [calls]}``. A sub-agent call's ``t`` below its sub-agent's own ``t`` is
read relative to it (inference-perf's rule). Every line is checked before it is used: a line, a session, a
call or a number out of bounds is one ``TraceError`` naming the file and the line.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rushhour.loadgen.bounded_json import JsonShapeError, check_depth
from rushhour.loadgen.trace_error import TraceError
from rushhour.scenarios.model import MAX_TOKENS

WEKA = "weka"
FORMATS = ("auto", WEKA)
MAX_FILE_BYTES = 2 << 30  # every load process holds the sessions (their hashes dropped once read)
MAX_LINE_BYTES = 64 << 20  # one session: its calls' block hashes (a 256k-token prompt at 64-token blocks: ~30 kB)
MAX_CALLS = 100_000  # calls of one session, its sub-agents' included
MAX_SESSIONS = 1_000_000
MAX_BLOCK_TOKENS = 1 << 20
MAX_SECONDS = 366 * 86_400.0  # a session's offsets: a year is already no session
CALL_TYPES = ("n", "s")  # a whole answer, a streamed one
SUBAGENT = "subagent"


@dataclass(frozen=True, slots=True)
class AgentCall:
    """One model call: its place, the wait before it, its sizes, the context it carries and the sub-agents it starts.

    ``gap_s`` is the trace's time between the answers this call waits for (its agent's previous call, and every
    sub-agent that call spawned; a sub-agent's first call: the spawning call) and its own send — the tools' time.
    ``prefix_tokens`` of its prompt were already in its predecessor's prompt (block hashes when the trace has them);
    ``carries``: its prompt is its agent's previous prompt and answer plus new text (the context grew, no compaction).
    """

    index: int  # 0-based over the whole session, in the trace's time order
    t_s: float  # seconds from the session's start
    gap_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_tokens: int
    carries: bool
    spawns: tuple[AgentRun, ...] = ()


@dataclass(frozen=True, slots=True)
class AgentRun:
    """One agent's calls in order: the session's main agent, or a sub-agent one of its calls spawned."""

    agent_id: str
    agent_type: str
    calls: tuple[AgentCall, ...]


@dataclass(frozen=True, slots=True)
class AgentSession:
    """One recorded session: its id, the line it came from, the main agent's run (sub-agents hang off its calls)."""

    session_id: str
    line: int
    system_tokens: int  # the system prompt and tools every agent of the session starts with
    main: AgentRun

    def runs(self) -> Iterator[AgentRun]:
        """The main agent's run, then every sub-agent's, depth first."""
        stack = [self.main]
        while stack:
            run = stack.pop()
            yield run
            for call in reversed(run.calls):
                stack.extend(reversed(call.spawns))

    def edges(self) -> list[tuple[AgentCall, int | None]]:
        """Every call with the index of the call whose answer it follows (None: the session's first call)."""
        out: list[tuple[AgentCall, int | None]] = [(self.main.calls[0], None)]
        for run in self.runs():
            for k, call in enumerate(run.calls):
                if k:
                    out.append((call, run.calls[k - 1].index))
                out.extend((sub.calls[0], call.index) for sub in call.spawns)
        return sorted(out, key=lambda edge: edge[0].index)

    @property
    def calls(self) -> int:
        return sum(len(run.calls) for run in self.runs())

    @property
    def spawning_calls(self) -> int:
        """Calls that started sub-agents (the report's "calls spawned sub-agents")."""
        return sum(1 for run in self.runs() for call in run.calls if call.spawns)

    @property
    def subagent_calls(self) -> int:
        """Calls made by sub-agents (the report's sub-agent requests)."""
        return self.calls - len(self.main.calls)


# --------------------------------------------------------------------------- checked fields


class _Bad(ValueError):
    """A field out of shape: the message says which and why."""


def _field(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise _Bad(f"{where} is not a JSON object")
    if key not in obj:
        raise _Bad(f"{where} has no {key!r}")
    return obj[key]


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Bad(f"{what} is not a finite number")
    if not 0 <= value <= MAX_SECONDS:
        raise _Bad(f"{what} {value!r} is outside 0 to {MAX_SECONDS:,.0f} s")
    return float(value)


def _count(value: Any, what: str, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{what} is not a whole number")
    if not 0 <= value <= top:
        raise _Bad(f"{what} {value:,} is outside 0 to {top:,}")
    return value


def _text(value: Any, what: str) -> str:
    """A short printable name (it reaches records and terminals: no control characters, at most 200 of them)."""
    if not isinstance(value, str | int) or isinstance(value, bool) or len(str(value)) > 200:
        raise _Bad(f"{what} is not a short string")
    if not str(value).isprintable():
        raise _Bad(f"{what} holds a control character")
    return str(value)


@dataclass(slots=True)
class _Raw:
    """A call as read, before the tree is built: absolute time, sizes, hashes."""

    t_s: float
    end_s: float
    prompt: int
    output: int
    hashes: tuple[int, ...]


def _raw_call(obj: Any, where: str, block: int, base_s: float | None) -> _Raw:
    kind = _field(obj, "type", where)
    if kind not in CALL_TYPES:
        raise _Bad(f"{where} has type {kind!r}, not a call ({', '.join(CALL_TYPES)})")
    t = _seconds(_field(obj, "t", where), f"{where}.t")
    if base_s is not None and t + 1e-6 < base_s:
        t += base_s  # a sub-agent's calls may count from the sub-agent's own start
    prompt = _count(_field(obj, "in", where), f"{where}.in", MAX_TOKENS)
    output = _count(_field(obj, "out", where), f"{where}.out", MAX_TOKENS)
    api = obj.get("api_time")
    duration = 0.0 if api is None else _seconds(api, f"{where}.api_time")
    hashes = obj.get("hash_ids", [])
    if not isinstance(hashes, list):
        raise _Bad(f"{where}.hash_ids is not a list")
    if len(hashes) > MAX_TOKENS // block + 1:
        raise _Bad(f"{where}.hash_ids has {len(hashes):,} blocks, more than a {MAX_TOKENS:,}-token prompt's")
    if any(isinstance(h, bool) or not isinstance(h, int) for h in hashes):
        raise _Bad(f"{where}.hash_ids holds something other than whole numbers")
    return _Raw(t, t + duration, prompt, output, tuple(hashes))


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _link(prev: _Raw | None, cur: _Raw, block: int, system: int, same_agent: bool) -> tuple[int, bool]:
    """(prefix tokens ``cur`` shares with ``prev``, whether it carries ``prev``'s whole context)."""
    if prev is None:
        return min(system, cur.prompt), False
    if prev.hashes and cur.hashes:
        common = _common(prev.hashes, cur.hashes)
        # the previous prompt's last block may have been partial: it changes as the context grows
        carries = same_agent and common >= len(prev.hashes) - 1 and cur.prompt >= prev.prompt
        return min(common * block, cur.prompt), carries
    if same_agent and cur.prompt >= prev.prompt:
        return min(prev.prompt + prev.output, cur.prompt), True
    return min(system, cur.prompt), False


def _session(obj: Any, line: int) -> AgentSession:
    sid = _text(_field(obj, "id", "the session"), "id")
    block = _count(_field(obj, "block_size", "the session"), "block_size", MAX_BLOCK_TOKENS)
    if block < 1:
        raise _Bad("block_size 0: blocks hold at least one token")
    system = (_count(obj.get("system_tokens", 0), "system_tokens", MAX_TOKENS)
              + _count(obj.get("tool_tokens", 0), "tool_tokens", MAX_TOKENS))
    requests = _field(obj, "requests", "the session")
    if not isinstance(requests, list):
        raise _Bad("requests is not a list")
    main: list[_Raw] = []
    subs: list[tuple[float, str, str, list[_Raw]]] = []
    total = 0
    for i, req in enumerate(requests):
        where = f"requests[{i}]"
        if isinstance(req, dict) and req.get("type") == SUBAGENT:
            start = _seconds(_field(req, "t", where), f"{where}.t")
            agent = _text(req.get("agent_id", f"sub{i}"), f"{where}.agent_id")
            kind = _text(req.get("subagent_type", ""), f"{where}.subagent_type")
            inner = req.get("requests", [])
            if not isinstance(inner, list):
                raise _Bad(f"{where}.requests is not a list")
            total += len(inner)
            if total > MAX_CALLS:
                raise _Bad(f"more than {MAX_CALLS:,} calls in one session")
            calls = [_raw_call(r, f"{where}.requests[{j}]", block, start) for j, r in enumerate(inner)]
            if calls:
                subs.append((start, agent, kind, sorted(calls, key=lambda c: c.t_s)))
        else:
            total += 1
            if total > MAX_CALLS:
                raise _Bad(f"more than {MAX_CALLS:,} calls in one session")
            main.append(_raw_call(req, where, block, None))
    if not main:
        raise _Bad("the session has no call of its main agent")
    main.sort(key=lambda c: c.t_s)
    # each sub-agent hangs off the main agent's last call started by the sub-agent's start
    spawned: dict[int, list[tuple[str, str, list[_Raw]]]] = {}
    starts = [c.t_s for c in main]
    for start, agent, kind, calls in sorted(subs, key=lambda s: s[0]):
        parent = bisect.bisect_right(starts, start + 1e-6) - 1  # a search: a session may hold 100,000 calls
        if parent < 0:
            raise _Bad(f"sub-agent {agent!r} starts at {start:g} s, before the main agent's first call")
        spawned.setdefault(parent, []).append((agent, kind, calls))
    index: dict[int, int] = {}  # id(raw) -> its index in the session's time order
    every = [*main, *(c for runs in spawned.values() for _, _, calls in runs for c in calls)]
    for n, raw in enumerate(sorted(every, key=lambda c: c.t_s)):
        index[id(raw)] = n

    def run_of(agent: str, kind: str, calls: list[_Raw], spawner: _Raw | None) -> AgentRun:
        built: list[AgentCall] = []
        for k, raw in enumerate(calls):
            prev = calls[k - 1] if k else spawner
            waited = prev.end_s if prev is not None else raw.t_s
            prefix, carries = _link(prev, raw, block, system, same_agent=k > 0)
            built.append(AgentCall(index[id(raw)], raw.t_s, max(0.0, raw.t_s - waited), raw.prompt, raw.output,
                                   prefix, carries))
        return AgentRun(agent, kind, tuple(built))

    main_calls: list[AgentCall] = []
    for k, raw in enumerate(main):
        prev = main[k - 1] if k else None
        waited = raw.t_s
        if prev is not None:
            ends = [prev.end_s, *(c.end_s for _, _, calls in spawned.get(k - 1, []) for c in calls)]
            waited = max(ends)
        prefix, carries = _link(prev, raw, block, system, same_agent=True)
        runs = tuple(run_of(agent, kind, calls, raw) for agent, kind, calls in spawned.get(k, []))
        main_calls.append(AgentCall(index[id(raw)], raw.t_s, max(0.0, raw.t_s - waited), raw.prompt, raw.output,
                                    prefix, carries, runs))
    return AgentSession(sid, line, system, AgentRun("main", "main", tuple(main_calls)))


# --------------------------------------------------------------------------- the file


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every non-blank line; sizes checked before a line is held whole."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise TraceError(f"{path}: {size:,} bytes, more than the {MAX_FILE_BYTES:,} an agent trace may have")
        with path.open("rb") as handle:
            for n, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
                if len(raw) > MAX_LINE_BYTES:
                    raise TraceError(f"{path}:{n}: a line of more than {MAX_LINE_BYTES:,} bytes (one session's "
                                     "limit)")
                if raw.strip():
                    yield n, raw
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the agent trace: {exc.strerror or exc}") from None


def read_agent_trace(path: Path, fmt: str = "auto", limit: int | None = None) -> list[AgentSession]:
    """The sessions of an agent trace (the first ``limit``); anything unusable is a one-line ``TraceError``."""
    if fmt not in FORMATS:
        raise TraceError(f"{path}: unknown agent-trace format {fmt!r} (known: {', '.join(FORMATS)})")
    sessions: list[AgentSession] = []
    for n, raw in _lines(path):
        if b"\x00" in raw:
            raise TraceError(f"{path}:{n}: binary data, not a JSON line (expected one Weka agent session per line)")
        try:
            line = raw.decode("utf-8")
            check_depth(line)
            obj = json.loads(line)
            sessions.append(_session(obj, n))
        except UnicodeDecodeError as exc:
            raise TraceError(f"{path}:{n}: not UTF-8 text (byte {exc.start} of the line)") from None
        except (JsonShapeError, _Bad) as exc:
            raise TraceError(f"{path}:{n}: {exc}") from None
        except (ValueError, RecursionError):
            raise TraceError(f"{path}:{n}: not a JSON object (expected one Weka agent session per line)") from None
        if len(sessions) > MAX_SESSIONS:
            raise TraceError(f"{path}: more than {MAX_SESSIONS:,} sessions")
        if limit is not None and len(sessions) >= limit:
            break
    if not sessions:
        raise TraceError(f"{path}: the agent trace has no sessions")
    return sessions
