"""Tail a run's shards cheaply while it runs and summarise them per tier (for the live view)."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rushhour.records.record import KIND_EVENT, KIND_HEALTH, KIND_REQUEST, RECORDS_DIR

LAG_WARN_NS = 50_000_000  # 50 ms of loop lag makes TTFT measurements doubtful
CPU_WARN = 90.0


@dataclass
class TierStats:
    sent: int = 0
    served: int = 0
    s429: int = 0
    s503: int = 0
    no_answer: int = 0  # no HTTP status: a client timeout, a refused connection, the client's breaker refusing
    other: int = 0
    not_sent: int = 0
    ttft_ms: deque[float] = field(default_factory=lambda: deque(maxlen=20000))

    def percentile(self, q: float) -> float | None:
        if not self.ttft_ms:
            return None
        values = sorted(self.ttft_ms)
        return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


@dataclass
class Health:
    loop_lag_ns: int = 0
    cpu_percent: float = 0.0
    in_flight: int = 0


class Listener(Protocol):
    """Gets every request and health line the tail reads (the early-abort watcher: audit/early.py)."""

    def feed(self, record: dict[str, Any], shard: str = "") -> None: ...


class ShardTail:
    """Reads only the bytes appended since the last poll; keeps a partial last line for next time."""

    def __init__(self, run_dir: Path) -> None:
        self.records_dir = Path(run_dir) / RECORDS_DIR
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self.tiers: dict[str, TierStats] = {}
        self.health: dict[str, Health] = {}
        self.events: list[dict[str, Any]] = []
        self.lines = 0
        self.listeners: list[Listener] = []

    def poll(self) -> int:
        """Consume new lines from every shard; returns how many were read."""
        if not self.records_dir.is_dir():
            return 0
        count = 0
        for path in sorted(self.records_dir.glob("*.jsonl")):
            offset = self._offsets.get(path, 0)
            try:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    data = handle.read()
            except OSError:
                continue
            if not data:
                continue
            self._offsets[path] = offset + len(data)
            data = self._partial.pop(path, b"") + data
            lines = data.split(b"\n")
            if lines[-1]:
                self._partial[path] = lines[-1]
            for line in lines[:-1]:
                if line:
                    count += self._line(path.stem, line)
        self.lines += count
        return count

    def _line(self, shard: str, line: bytes) -> int:
        try:
            obj = json.loads(line)
        except ValueError:
            return 0
        if not isinstance(obj, dict):
            return 0
        kind = obj.get("kind")
        if kind in (KIND_REQUEST, KIND_HEALTH):
            for listener in self.listeners:
                listener.feed(obj, shard)
        if kind == KIND_REQUEST:
            self._request(obj)
        elif kind == KIND_HEALTH:
            self.health[shard] = Health(obj.get("loop_lag_ns", 0), obj.get("cpu_percent", 0.0), obj.get("in_flight", 0))
        elif kind == KIND_EVENT:
            obj.setdefault("shard", shard)  # which process said it (the runner merges per-process budgets)
            self.events.append(obj)
        return 1

    def _request(self, obj: dict[str, Any]) -> None:
        stats = self.tiers.setdefault(obj.get("tier", "?"), TierStats())
        if obj.get("not_sent"):
            stats.not_sent += 1
            return
        stats.sent += 1
        status = obj.get("status", 0)
        if 200 <= status < 300 and obj.get("complete") and not obj.get("in_band_error"):
            stats.served += 1
            first, sent = obj.get("first_token_ns"), obj.get("sent_ns")
            if first is not None and sent is not None:
                stats.ttft_ms.append((first - sent) / 1e6)
        elif status == 429:
            stats.s429 += 1
        elif status == 503:
            stats.s503 += 1
        elif not status:
            stats.no_answer += 1
        else:
            stats.other += 1

    def saturated(self) -> str | None:
        """A warning when any generator process is too busy to time requests honestly."""
        for shard, h in self.health.items():
            if h.loop_lag_ns > LAG_WARN_NS:
                return f"generator {shard}: event-loop lag {h.loop_lag_ns / 1e6:.0f} ms — add processes"
            if h.cpu_percent > CPU_WARN:
                return f"generator {shard}: CPU {h.cpu_percent:.0f} % — add processes"
        if any(s.not_sent for s in self.tiers.values()):
            return "some arrivals were not sent (no free slot): the generator or the scenario limits load"
        return None

    def stop_reason(self) -> str | None:
        """``budget`` when a process stopped the run on its budget, ``template_error`` on its chat template."""
        for event in self.events:
            if event.get("name") == "budget_reached" and (event.get("detail") or {}).get("scope") == "run":
                return "budget"
            if event.get("name") == "template_error":
                return "template_error"
        return None

    def template_error(self) -> str | None:
        """The one line of the first chat template over a cap in a load process, if one was."""
        found = next((e for e in self.events if e.get("name") == "template_error"), None)
        return None if found is None else str((found.get("detail") or {}).get("message") or "")


def progress_line(tail: ShardTail, elapsed_s: float, total_s: float) -> str:
    """One line for a CI log: elapsed/planned, then per tier the attempts that finished so far.

    ``load 15/65 s, 3 in flight · interactive: 40 sent, 40 served, 0 not served · batch: 80 sent,
    72 served, 8 not served (429 6, 503 2)``. "Sent" counts attempts whose record is written (finished),
    "not served" every one of them that was not a complete 2xx (fail closed, as the audit counts; the
    audit's own figures fold retries into logical requests).
    """
    flight = sum(h.in_flight for h in tail.health.values())
    head = f"load {elapsed_s:.0f}/{total_s:.0f} s"
    if tail.health:
        head += f", {flight:,} in flight"
    if not tail.tiers:
        return head + " · no request finished yet"
    parts = [head]
    for name, s in sorted(tail.tiers.items()):
        unserved = s.sent - s.served
        part = f"{name}: {s.sent:,} sent, {s.served:,} served, {unserved:,} not served"
        detail = [f"{label} {count:,}" for label, count in (("429", s.s429), ("503", s.s503),
                                                            ("no answer", s.no_answer), ("other", s.other)) if count]
        if unserved and detail:
            part += f" ({', '.join(detail)})"
        if s.not_sent:
            part += f", {s.not_sent:,} not sent"
        parts.append(part)
    return " · ".join(parts)


def render(tail: ShardTail, elapsed_s: float, total_s: float) -> Any:
    """A rich renderable: one row per tier plus generator health."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"rushhour  {elapsed_s:5.0f} / {total_s:.0f} s", expand=False)
    for col in ("tier", "sent", "served", "429", "503", "no answer", "other", "not sent", "TTFT p50 ms",
                "TTFT p99 ms"):
        table.add_column(col, justify="right" if col != "tier" else "left")
    for name, s in sorted(tail.tiers.items()):
        p50, p99 = s.percentile(0.5), s.percentile(0.99)
        table.add_row(
            name,
            str(s.sent),
            str(s.served),
            str(s.s429),
            str(s.s503),
            str(s.no_answer),
            str(s.other),
            str(s.not_sent),
            f"{p50:.0f}" if p50 is not None else "-",
            f"{p99:.0f}" if p99 is not None else "-",
        )
    parts: list[Any] = [table]
    if tail.health:
        lag = max(h.loop_lag_ns for h in tail.health.values()) / 1e6
        cpu = max(h.cpu_percent for h in tail.health.values())
        flight = sum(h.in_flight for h in tail.health.values())
        parts.append(
            Text(
                f"generator: {len(tail.health)} proc, loop lag max {lag:.1f} ms, CPU max {cpu:.0f} %, "
                f"in flight {flight}"
            )
        )
    warning = tail.saturated()
    if warning:
        parts.append(Text("warning: " + warning, style="bold yellow"))
    return Group(*parts)
