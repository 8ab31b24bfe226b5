"""One simulated HTTP exchange: what the testbed's server would answer, recorded as the wire client records it.

The testbed's ``server.py`` turns a stack's decisions into HTTP (a rejection before any byte, a 200 whose
stream ends, breaks or carries an in-band error); ``loadgen``'s wire client turns HTTP into record facts
(status, reason from the stack's header or the error body, tokens, timing). Here the two meet without
the bytes: the job's events fill the ``RequestRecord`` with the facts those two would have produced,
so the audit classifies a simulated attempt by the same rules as a real one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rushhour import stacks
from rushhour.records.record import RequestRecord, error_summary, short_text
from rushhour.sim.loop import Future, Loop
from rushhour.stacks.timing import from_headers, from_metrics
from rushhour.testbed.job import EVICTED, REPLICA_DOWN, Job
from rushhour.testbed.profiles import AnthropicProfile, Profile, Reply
from rushhour.testbed.timing import engine_metrics, timing_headers

CLOSED_EARLY = "connection closed before the end of the response"


@dataclass(slots=True)
class Deadlines:
    """The attempt's client-side deadlines (ns from the anchor; None = none)."""

    first_token_ns: int | None
    total_ns: int | None
    patience: bool = False  # the first-token deadline is the user's patience, not the client's


_FACTS: dict[tuple[int, bytes, tuple[tuple[str, str], ...]], tuple[str | None, str | None, float | None]] = {}
_FACTS_MAX = 4096


def error_facts(reply: Reply) -> tuple[str | None, str | None, float | None]:
    """(reason, error text, Retry-After seconds) of an error response, as the wire client reads them (a pure
    function of status, body and headers: kept, since a rejection storm answers the same 429 by the thousand)."""
    key = (reply.status, reply.body, tuple(reply.headers.items()))
    facts = _FACTS.get(key)
    if facts is None:
        if len(_FACTS) >= _FACTS_MAX:
            _FACTS.clear()
        facts = _FACTS[key] = _error_facts(reply)
    return facts


def _error_facts(reply: Reply) -> tuple[str | None, str | None, float | None]:
    headers = {k.lower(): v for k, v in reply.headers.items()}
    reason = stacks.header_reason(headers, reply.status)
    text: str | None
    body = reply.body.strip()
    body_reason: str | None = None
    if body[:1] == b"{":
        body_reason, text = _json_error(body)
    else:
        text = short_text(body) if body else None
    retry = headers.get("retry-after")
    try:
        retry_s = float(retry) if retry is not None else None
    except ValueError:
        retry_s = None
    return reason or body_reason, text, retry_s


def _json_error(body: bytes) -> tuple[str | None, str | None]:
    """(reason, message) of an error body in any dialect's shape, as the wire client reads it."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None, short_text(body)
    return error_summary(obj)


class Exchange:
    """The ``JobSink`` of one simulated attempt: engine events become record facts; ``done`` resolves at the end."""

    __slots__ = (
        "_dispatched",
        "_itl_sum",
        "_prev_token",
        "cancel",
        "cut_after",
        "done",
        "job",
        "loop",
        "profile",
        "record",
        "service_tier",
        "stream",
    )

    def __init__(self, loop: Loop, record: RequestRecord, profile: Profile, stream: bool,
                 cancel: Callable[[Job], Any]) -> None:
        self.loop = loop
        self.record = record
        self.job: Job | None = None
        self.profile = profile
        self.stream = stream
        self.done = Future()
        self.cancel = cancel  # the stack's cancel: the client went away
        self.cut_after: int | None = None  # a stream_cut fault: the connection closes after k tokens
        self._prev_token: int | None = None
        self._itl_sum = 0
        self._dispatched = False
        self.service_tier: str | None = None

    # ---- JobSink ---------------------------------------------------------------------------
    def on_dispatch(self, job: Job) -> None:
        """Placed on a replica: a stream's 200 and headers go out now."""
        self._dispatched = True
        if self.stream and not self.done.done:
            self.record.status = 200
            self.record.headers_ns = self.loop.clock.t
            self._server_timing(job, headers=True, served=False)  # the gateway's timing rides on a stream's headers

    def on_token(self, job: Job) -> None:
        """Tokens of a fired step reach the client (one SSE event each)."""
        if self.done.done or not self.stream:
            return
        rec = self.record
        now = self.loop.clock.t
        new = job.output - rec.tokens
        if new <= 0:
            return
        if rec.first_token_ns is None:
            rec.first_token_ns = now
        elif self._prev_token is not None:
            gap = now - self._prev_token
            self._itl_sum += gap * new
            if rec.itl_max_ns is None or gap > rec.itl_max_ns:
                rec.itl_max_ns = gap
        self._prev_token = rec.last_token_ns = now
        rec.tokens = job.output
        if self.cut_after is not None and rec.tokens >= self.cut_after:
            rec.tokens = self.cut_after
            self.cancel(job)
            rec.error = CLOSED_EARLY
            self._end()

    def on_token_run(self, job: Job, first_ns: int, last_ns: int, max_gap_ns: int | None) -> None:
        """Tokens of a run of steps at once (a decode jump): the facts ``on_token`` step by step would leave;
        ``max_gap_ns`` is the largest gap between the run's steps (None for a run of one step)."""
        if self.done.done or not self.stream:
            return
        rec = self.record
        if job.output - rec.tokens <= 0:
            return
        gap = max_gap_ns
        if rec.first_token_ns is None:
            rec.first_token_ns = first_ns
        elif self._prev_token is not None:
            lead = first_ns - self._prev_token
            gap = lead if gap is None or lead > gap else gap
            self._itl_sum += last_ns - self._prev_token
        if gap is not None and (rec.itl_max_ns is None or gap > rec.itl_max_ns):
            rec.itl_max_ns = gap
        self._prev_token = rec.last_token_ns = last_ns
        rec.tokens = job.output

    def on_finish(self, job: Job) -> None:
        """Every token exists: a complete answer with its usage."""
        if self.done.done:
            return
        rec = self.record
        now = self.loop.clock.t
        rec.status = 200
        if rec.headers_ns is None:
            rec.headers_ns = now
        if not self.stream:  # the whole body at once: first token = last token = done
            rec.first_token_ns = rec.last_token_ns = now
            rec.tokens = 1
        rec.complete = True
        rec.prompt_tokens = job.prompt_tokens
        rec.output_tokens = job.output
        rec.cached_tokens = job.cached_tokens
        rec.service_tier = self.service_tier
        self._server_timing(job, headers=not self.stream, served=True)  # a stream's headers were written at dispatch
        if rec.tokens > 1 and self.stream and rec.first_token_ns is not None and rec.last_token_ns is not None:
            rec.itl_mean_ns = (rec.last_token_ns - rec.first_token_ns) // (rec.tokens - 1)
        self._end()

    def on_drop(self, job: Job, kind: str) -> None:
        """Flow control or the engine ended the job."""
        if self.done.done:
            return
        rec = self.record
        if not self.stream:  # an answer after dispatch carries the gateway's timing (a stream's went out already)
            self._server_timing(job, headers=True, served=False)
        if self.stream and self._dispatched:
            if kind in (REPLICA_DOWN, EVICTED):
                rec.error = CLOSED_EARLY  # the server closes the connection mid-stream
            else:
                reply = self.profile.drop(kind, rec.request_id, True)
                reason, text, _ = error_facts(reply)
                rec.in_band_error, rec.reason = text or "error", reason
                # OpenAI-style streams end with [DONE] after the error event; Anthropic's do not
                rec.complete = not isinstance(self.profile, AnthropicProfile)
            self._end()
            return
        self.reply(self.profile.drop(kind, rec.request_id, False))

    def _server_timing(self, job: Job, headers: bool, served: bool) -> None:
        """What the imitated stack reports of this request's timing, read as the wire client reads it (testbed/
        timing.py: the HTTP testbed sends the same): the gateway's headers, and on a served answer vLLM's metrics."""
        rec = self.record
        facts = from_headers(timing_headers(self.profile, job, self.stream)) if headers else {}
        if served:
            messages = rec.dialect == "anthropic-messages"
            facts.update(from_metrics(engine_metrics(self.profile, job, job.output, self.stream, messages)))
        for name, value in facts.items():
            setattr(rec, name, value)

    # ---- ends --------------------------------------------------------------------------------
    def reply(self, reply: Reply) -> None:
        """An answer without a stream (a rejection, an injected error)."""
        if self.done.done:
            return
        rec = self.record
        rec.status = reply.status
        rec.headers_ns = self.loop.clock.t
        rec.reason, rec.error, rec.retry_after_s = error_facts(reply)
        self._end()

    def timeout(self, deadlines: Deadlines) -> None:
        """A client deadline passed before the end: the connection is closed (the stack sees a cancel)."""
        if self.done.done:
            return
        rec = self.record
        waiting_first = rec.first_token_ns is None
        if self.job is not None:
            self.cancel(self.job)
        if deadlines.patience and waiting_first:
            rec.abandoned = True
        else:
            rec.client_timeout = True
            rec.error = f"client timeout waiting for the {'first token' if waiting_first else 'response'}"
        self._end()

    def stop(self) -> None:
        """The run's hard stop: the attempt is cancelled where it stands."""
        if self.done.done:
            return
        if self.job is not None:
            self.cancel(self.job)
        self.record.cancelled = True
        self._end()

    def _end(self) -> None:
        # The job keeps this exchange as its sink: without the edge back the pair is no cycle, and reference
        # counting frees both (and the job's prompt blocks) when the attempt is over. The run sweeps only the
        # youngest generation (``sim.run.young_collections_only``), so a cycle that outlived one sweep stayed
        # for good: ≈ 700 objects and ≈ 1.8 MB per simulated second of the realistic benchmark case.
        self.job = None
        self.record.done_ns = self.loop.clock.t
        self.done.resolve(self.record)
