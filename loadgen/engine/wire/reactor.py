"""One receive loop per process: a greenlet waits on every stream socket at once and parses what is ready.

Without it each stream's greenlet woke for each chunk (one epoll wake-up and two greenlet switches per
SSE event). Here the process's plain sockets sit in one ``epoll`` set; a single greenlet waits on that
set's file descriptor (one gevent watcher), and on each wake-up reads every ready socket in one pass,
stamps each read (until the first token with the kernel's receive time of its bytes, after it with
``time.monotonic_ns()`` the moment ``recv`` returns them) and feeds the parser.
The user greenlet of an attempt sleeps until something it cares about happens: its first token, the
end marker, the end of the response, an error, or its deadline.

While it has streams, the cyclic collector keeps to young sweeps (``collector.py``): a full sweep held
the loop for tens of ms, and a first token read late together with later tokens carries a later stamp.

Fairness: at most ``MAX_READS_PER_WAKE`` reads per socket per pass (a socket that floods at full speed
is simply ready again on the next pass), and the loop goes back to the gevent hub between passes, so
timers (deadlines), users and the health sampler run however busy the sockets are.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import time
from typing import Any

import gevent
from gevent.event import Event
from gevent.hub import get_hub
from gevent.monkey import get_original

from rushhour.loadgen.engine.wire.collector import collector
from rushhour.records.record import FIRST_TOKEN_KERNEL, FIRST_TOKEN_RECV

# the real epoll: Locust monkey-patches ``select`` (gevent's has none), and this loop must not block in it
_epoll, _EPOLLIN = get_original("select", ["epoll", "EPOLLIN"])

RECV_BYTES = 65536
MAX_READS_PER_WAKE = 4  # back-to-back full reads of one socket in one pass (256 KiB)
_STALE_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED, errno.ENOTCONN})
_MAX_EVENTS = 1024  # ready sockets taken per pass; the rest are ready again at the next one
# Until its first token a stream is read with recvmsg and the kernel's receive timestamp of the bytes
# (SO_TIMESTAMPNS, Linux; CLOCK_REALTIME, put on the monotonic clock here): the first-token time then
# holds no wait for this process to be scheduled, or for the reactor to reach the socket in its pass.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python does not export it
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
_ANC_BYTES = socket.CMSG_SPACE(16)  # one struct timespec
_TIMESPEC = struct.Struct("@qq")
KERNEL_STAMP_MAX_AGE_NS = 10_000_000_000  # an older stamp means the wall clock stepped: the recv time is used


class Stream:
    """One attempt's socket while the reactor reads it: its parser, deadline and outcome.

    ``phase`` and ``deadline`` are the caller's (``wire.client``): ``phase(attempt)`` says which
    deadline applies, ``deadline(attempt, now)`` when it is; the reactor re-reads them when the phase
    changes and wakes the waiting user then (first token, end marker).
    """

    __slots__ = (
        "_recv",
        "_recvmsg",
        "attempt",
        "deadline",
        "deadline_at",
        "end_ns",
        "eof",
        "error",
        "fd",
        "finished",
        "may_retry",
        "parser",
        "phase",
        "phase_now",
        "stale",
        "wake",
    )

    def __init__(self, sock: Any, parser: Any, attempt: Any, phase: Any, deadline: Any, may_retry: bool) -> None:
        self.fd = sock.fileno()
        raw = sock._sock  # the real (non-blocking) socket: no gevent wait, no timer
        self._recv = raw.recv
        self._recvmsg = raw.recvmsg
        self.parser = parser
        self.attempt = attempt
        self.phase = phase
        self.deadline = deadline
        self.phase_now = phase(attempt)
        self.deadline_at = deadline(attempt, time.monotonic_ns())
        self.may_retry = may_retry
        self.finished = False
        self.eof = False
        self.stale = False  # a reused connection that died before any response byte
        self.end_ns: int | None = None
        self.error: BaseException | None = None
        self.wake = Event()

    def pump(self, reactor: Reactor) -> None:
        """Read what is ready (bounded), timestamp each read, parse; finish on end, error or deadline."""
        recv = self._recv
        parser = self.parser
        for _ in range(MAX_READS_PER_WAKE):
            try:
                if self.phase_now == 0:  # before the first token: the kernel's receive time
                    data, anc, _, _ = self._recvmsg(RECV_BYTES, _ANC_BYTES)
                    now = time.monotonic_ns()
                    stamp = kernel_ns(anc, now) if anc else now
                else:
                    data = recv(RECV_BYTES)
                    now = stamp = time.monotonic_ns()
            except BlockingIOError:
                return
            except OSError as exc:
                if self.may_retry and exc.errno in _STALE_ERRNOS and not parser.received_any:
                    self.stale = True
                else:
                    self.error = exc
                reactor.finish(self)
                return
            if not data:
                if self.may_retry and not parser.received_any:
                    self.stale = True
                else:
                    self.eof = True
                    parser.feed_eof()
                    self.end_ns = now
                reactor.finish(self)
                return
            if now >= self.deadline_at:
                self.error = TimeoutError()
                reactor.finish(self)
                return
            try:
                parser.feed(data, stamp)
            except Exception as refused:  # httptools' errors and the caps: the user raises them in its own frame
                self.error = refused
                reactor.finish(self)
                return
            if self.phase_now == 0:
                _note_first_token(self.attempt, stamp, now)
            if parser.done:
                self.end_ns = stamp
                reactor.finish(self)
                return
            interp = self.attempt.interp
            if self.phase_now == 1 and interp is not None and not interp.complete:
                pass  # streaming tokens, the common case: the phase cannot have changed
            elif (phase := self.phase(self.attempt)) != self.phase_now:
                # first token or end marker: a new deadline, and the user hears of it
                self.phase_now = phase
                self.deadline_at = self.deadline(self.attempt, now)
                self.wake.set()
            if len(data) < RECV_BYTES:
                return

    def wait(self) -> None:
        """Block the calling (user) greenlet until the stream finished; raises TimeoutError at its deadline."""
        wake = self.wake
        while not self.finished:
            remaining = self.deadline_at - time.monotonic_ns()
            if remaining <= 0:
                raise TimeoutError
            wake.wait(remaining / 1e9)
            wake.clear()


def _keep_stamping() -> socket.socket | None:
    """A socket that keeps the kernel's receive timestamping on for this process's life.

    Linux turns timestamping on for every socket only while some socket asks for it, and turns it on
    late (deferred work) when the first one asks: a fast answer's bytes could land before that, unstamped
    (the record then says ``recv``). One idle UDP socket that asks from the process's start avoids it.
    """
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return None
    try:
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        keeper.close()
        return None
    return keeper


_KEEPER: tuple[int, socket.socket | None] | None = None


def stamp_receives(sock: Any) -> None:
    """Ask the kernel to timestamp what ``sock`` receives: before the request is written, since bytes that
    arrived before the option was set carry no stamp (a fast answer's first read would be timed at recv)."""
    global _KEEPER
    if _KEEPER is None or _KEEPER[0] != os.getpid():  # a forked process keeps its own
        _KEEPER = (os.getpid(), _keep_stamping())
    with contextlib.suppress(OSError, AttributeError):  # without it the first token is stamped at recv
        sock._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def _note_first_token(attempt: Any, stamp: int, now: int) -> None:
    """If this read brought the first token: how it was timed, when the loop read it, how many tokens it held."""
    interp = attempt.interp
    if interp is None or interp.first_token_ns is None or attempt.ft_read_ns is not None:
        return
    attempt.ft_clock = FIRST_TOKEN_KERNEL if stamp != now else FIRST_TOKEN_RECV
    attempt.ft_read_ns = now
    attempt.ft_batch = interp.tokens  # every token so far came in this read


def kernel_ns(ancillary: list[tuple[int, int, bytes]], now: int) -> int:
    """The kernel's receive time of a read (SCM_TIMESTAMPNS) on the monotonic clock; ``now`` if there is none
    or it is not plausible (later than now, or older than KERNEL_STAMP_MAX_AGE_NS: the wall clock stepped)."""
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            stamp = sec * 1_000_000_000 + nsec - (time.time_ns() - time.monotonic_ns())
            if now - KERNEL_STAMP_MAX_AGE_NS < stamp <= now:
                return stamp
    return now


class Reactor:
    """The process's receive loop: an epoll set of stream sockets, read by one greenlet."""

    def __init__(self) -> None:
        self._epoll = _epoll()
        self._streams: dict[int, Stream] = {}
        self._glet: gevent.Greenlet | None = None
        self._watcher: Any = None
        self._collector = collector(self.busy)
        self.passes = 0  # wake-ups of the loop (for the benchmark: events per pass)

    def add(self, stream: Stream) -> None:
        self._epoll.register(stream.fd, _EPOLLIN)
        self._streams[stream.fd] = stream
        if self._glet is None or self._glet.dead:
            self._glet = gevent.spawn(self._run)
        # a full sweep of the collector would stall every stream at once (collector.py); idempotent
        self._collector.start()

    def busy(self) -> bool:
        """Whether any stream is being read."""
        return bool(self._streams)

    def remove(self, stream: Stream) -> None:
        """Stop reading ``stream`` (idempotent): before its socket is closed or pooled again."""
        if self._streams.get(stream.fd) is stream:
            del self._streams[stream.fd]
            with contextlib.suppress(OSError, ValueError):
                self._epoll.unregister(stream.fd)

    def finish(self, stream: Stream) -> None:
        self.remove(stream)
        stream.finished = True
        stream.wake.set()

    def _run(self) -> None:
        hub = get_hub()
        if self._watcher is None:
            self._watcher = hub.loop.io(self._epoll.fileno(), 1)
        watcher = self._watcher
        poll = self._epoll.poll
        streams = self._streams
        while streams:
            # the one switch per pass: back to the hub (timers, users, health) until any socket is readable
            hub.wait(watcher)
            self.passes += 1
            for fd, _ in poll(0, _MAX_EVENTS):
                stream = streams.get(fd)
                if stream is not None:
                    try:
                        stream.pump(self)
                    except Exception as exc:  # one stream's surprise must not stop every other stream's reading
                        stream.error = exc
                        self.finish(stream)


_REACTOR: tuple[int, Reactor] | None = None


def reactor() -> Reactor:
    """This process's reactor (made on first use; a forked process makes its own: epoll sets are shared by fork)."""
    global _REACTOR
    pid = os.getpid()
    if _REACTOR is None or _REACTOR[0] != pid:
        _REACTOR = (pid, Reactor())
    return _REACTOR[1]
