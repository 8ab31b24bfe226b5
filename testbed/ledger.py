"""The ground-truth ledger: one JSON line per arrival, written once when the request ends."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from typing import IO

OUTCOMES = ("served", "queue_full", "queue_timeout", "shed", "preempted", "rate_limited", "overloaded",
            "failed", "cancelled")


@dataclass
class Record:
    """Final record of one request (field names are a contract with the audit's ground-truth tests)."""

    request_id: str
    arrival_ns: int
    dispatch_ns: int | None = None
    scheduled_ns: int | None = None  # first entered a running batch on its replica (the engine queue's end)
    first_token_ns: int | None = None
    end_ns: int | None = None
    queue_wait_ns: int | None = None
    profile: str = ""
    objective: str | None = None
    priority: int | None = None
    tenant: str | None = None
    service_tier: str | None = None
    model: str | None = None
    endpoint: str = ""
    stream: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    max_tokens: int = 0
    output_tokens: int = 0
    replica: int | None = None
    preemptions: int = 0
    status: int | None = None
    reason: str | None = None
    in_band_error: bool = False
    outcome: str = "failed"
    fault: str | None = None
    tool_call: str | None = None  # the id of the tool call the answer carried (config `tool_calls`)
    tool_results: list[str] = field(default_factory=list)  # tool-call ids the request's messages answered
    traceparent: str | None = None  # the W3C trace context the request carried (at most 64 characters kept)


class Ledger:
    """Keeps every line in memory (for GET /admin/ledger) and appends it to a file, flushed per line."""

    def __init__(self, path: str | None = None) -> None:
        self._fh: IO[str] | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def write(self, rec: Record) -> None:
        """Append one final record."""
        assert rec.outcome in OUTCOMES, rec.outcome
        line = json.dumps(asdict(rec), separators=(",", ":")) + "\n"
        with self._lock:
            self.lines.append(line)
            if self._fh is not None:
                self._fh.write(line)
                self._fh.flush()

    def text(self) -> str:
        """The whole ledger as JSONL."""
        return "".join(self.lines)

    def close(self) -> None:
        """Flush and close the file."""
        if self._fh is not None:
            self._fh.flush()
            self._fh.close()
            self._fh = None
