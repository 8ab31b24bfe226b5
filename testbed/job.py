"""A request as the scheduler sees it, and the sink it reports to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

# job.state values
NEW, QUEUED, WAITING, RUNNING, DONE = "new", "queued", "waiting", "running", "done"

# Drop kinds raised by flow control or the engine; the profile maps each to a status and body.
QUEUE_FULL = "queue_full"
TTL_EXPIRED = "ttl_expired"
NO_ENDPOINTS = "no_endpoints"
DISPLACED = "displaced"  # SGLang: aborted by a higher-priority arrival
WAITING_TIMEOUT = "waiting_timeout"  # SGLang SGLANG_REQ_WAITING_TIMEOUT
REPLICA_DOWN = "replica_down"
EVICTED = "evicted"  # llm-d enableEviction
CANCELLED = "cancelled"


class JobSink(Protocol):
    """Receives a job's life events from flow control and the engine."""

    def on_dispatch(self, job: Job) -> None:
        """The job was placed on a replica."""

    def on_token(self, job: Job) -> None:
        """One more output token exists (job.output was incremented)."""

    def on_finish(self, job: Job) -> None:
        """All max_tokens tokens exist."""

    def on_drop(self, job: Job, kind: str) -> None:
        """Flow control or the engine ended the job (a drop kind above)."""


class NullSink:
    """A sink that ignores everything."""

    def on_dispatch(self, job: Job) -> None:
        """Ignore."""

    def on_token(self, job: Job) -> None:
        """Ignore."""

    def on_finish(self, job: Job) -> None:
        """Ignore."""

    def on_drop(self, job: Job, kind: str) -> None:
        """Ignore."""


@dataclass(eq=False, repr=False)
class Job:
    """One admitted request: sizes, priority and scheduling state."""

    rid: str
    arrival_ns: int
    prompt_tokens: int
    max_tokens: int
    blocks: Sequence[int] = ()  # prefix-block ids (testbed.tokens.block_hashes: an array of 64-bit ids)
    body_bytes: int = 0
    priority: int = 0  # the profile's own numeric priority (flow-control band, vLLM/SGLang value)
    rank: float = 0.0  # engine ordering: lower = more urgent (polarity already normalised)
    tenant: str = "default-flow"
    tier: int = 0  # headroom tier index (0 = highest)
    sink: JobSink = field(default_factory=NullSink)
    state: str = NEW
    replica: int | None = None
    enqueue_ns: int = 0  # entered the current queue (gateway band or replica waiting)
    dispatch_ns: int | None = None
    scheduled_ns: int | None = None  # first entered a running batch
    first_token_ns: int | None = None
    end_ns: int | None = None
    cached_tokens: int = 0
    computed: int = 0  # tokens with KV on the replica
    output: int = 0  # tokens generated
    preemptions: int = 0
    seq: int = 0  # tie-breaker for heaps
    key: tuple[float, int, int] = (0.0, 0, 0)  # order_key(), cached when the job enters a replica

    def __repr__(self) -> str:
        # short: ``deque.remove`` of an absent job formats it into its ValueError, and a generated repr
        # would print every block hash of a long prompt (≈ 0.25 ms per cancel of a request not queued)
        return f"Job({self.rid!r}, {self.state})"

    def order_key(self) -> tuple[float, int, int]:
        """Engine queue order: most urgent first, then FCFS."""
        return (self.rank, self.arrival_ns, self.seq)
