"""The reactor receive path: the same records as the per-greenlet path, and no user wake-up per event."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import gevent
import greenlet
import pytest
from test_wire_client import attempt
from wire_fakes import FakeServer

from rushhour.loadgen.engine.wire import client
from rushhour.loadgen.engine.wire.client import ConnectionPool, Timeouts
from rushhour.loadgen.engine.wire.reactor import reactor

pytestmark = pytest.mark.timeout(120)

# every time-free fact a record holds (times differ run to run; their order is checked elsewhere)
_TIMES = {"sent_ns", "headers_ns", "first_token_ns", "last_token_ns", "done_ns", "itl_max_ns", "itl_mean_ns",
          "token_ns"}
# how the first token was timed differs by path on purpose (the reactor takes the kernel's stamp): checked below
_HOW_TIMED = {"first_token_clock", "first_token_read_ns", "first_token_batch"}
MODES = ["ok", "anthropic", "inband", "malformed", "html", "429", "llmd429", "truncate", "reset", "silent",
         "garbage", "flood", "floodevents", "floodhead", "tricklehead", "bigjson"]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.close()


def _facts(port: int, mode: str, use_reactor: bool) -> dict[str, Any]:
    client.USE_REACTOR = use_reactor
    try:
        dialect = "anthropic-messages" if mode == "anthropic" else "openai-chat"
        rec, pool = attempt(port, mode, dialect=dialect, timeouts=Timeouts(connect_s=1, ttft_s=1, total_s=1.5))
        pool.close()
    finally:
        client.USE_REACTOR = True
    facts = {k: v for k, v in dataclasses.asdict(rec).items() if k not in _TIMES | _HOW_TIMED}
    facts["has_first_token"] = rec.first_token_ns is not None
    if mode == "floodevents":  # how many tokens a flood delivers before its deadline is timing, not content
        facts["tokens"] = facts["tokens"] > 0
    return facts


@pytest.mark.parametrize("mode", MODES)
def test_reactor_records_match_the_greenlet_path(server: FakeServer, mode: str) -> None:
    assert _facts(server.port, mode, True) == _facts(server.port, mode, False)


def test_each_path_says_how_it_timed_the_first_token(server: FakeServer) -> None:
    """The reactor: the kernel's receive stamp, the read after it, the tokens in that read; the greenlet path: recv."""
    # the process's first request may race the kernel turning stamping on (its record then says recv, truly)
    attempt(server.port, "ok")[1].close()
    for use_reactor, clock in ((True, "kernel"), (False, "recv")):
        client.USE_REACTOR = use_reactor
        try:
            rec, pool = attempt(server.port, "ok", timeouts=Timeouts(connect_s=1, ttft_s=1, total_s=1.5))
            pool.close()
        finally:
            client.USE_REACTOR = True
        assert rec.first_token_ns is not None and rec.first_token_read_ns is not None
        assert rec.first_token_clock == clock, rec
        assert rec.first_token_read_ns >= rec.first_token_ns
        assert (rec.first_token_batch or 0) >= 1 if use_reactor else rec.first_token_batch is None


def _user_wakeups(port: int, streams: int, use_reactor: bool) -> tuple[int, int]:
    """(switches into the user greenlets, tokens received) while ``streams`` users each read one response."""
    client.USE_REACTOR = use_reactor
    users: set[Any] = set()
    switches = 0

    def trace(event: str, args: Any) -> None:
        nonlocal switches
        if event in ("switch", "throw") and args[1] in users:
            switches += 1

    tokens = 0

    def user() -> None:
        nonlocal tokens
        pool: ConnectionPool | None = None
        rec, pool = attempt(port, "slowtokens", pool=pool, timeouts=Timeouts(connect_s=2, ttft_s=10, total_s=20))
        tokens += rec.tokens
        pool.close()

    old = greenlet.settrace(trace)
    try:
        glets = [gevent.spawn(user) for _ in range(streams)]
        users.update(glets)
        gevent.joinall(glets, timeout=60)
    finally:
        greenlet.settrace(old)
        client.USE_REACTOR = True
    return switches, tokens


# serial: the old path's wake-ups are one per TCP read; a starved client reads several tokens at once (186 of
# 600 expected beside parallel workers under load): the control count needs the server's 2 ms gaps intact
@pytest.mark.serial
def test_users_wake_per_phase_not_per_event(server: FakeServer) -> None:
    switches, tokens = _user_wakeups(server.port, 20, True)
    assert tokens == 20 * 30
    # start, connect, send, first token, end: a handful per user, not one per token
    assert switches <= 20 * 10, switches
    before, tokens = _user_wakeups(server.port, 20, False)
    assert tokens == 20 * 30 and before >= 20 * 30, before  # the old path: at least one per token
    assert reactor().passes > 0


def test_reactor_uses_the_real_epoll_in_a_monkey_patched_locust_process() -> None:
    """Locust patches ``select`` (gevent's has no epoll): the reactor must take the original one."""
    import subprocess
    import sys

    code = ("import locust  # noqa: F401 - patches the standard library\n"
            "from rushhour.loadgen.engine.wire.reactor import reactor\n"
            "print(type(reactor()._epoll).__module__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "select", done.stderr[-2000:]



def _ttft_while_blocked_ms(use_reactor: bool) -> float:
    """TTFT of a response whose first token is sent 50 ms after the request, with this process blocked from
    20 ms to 320 ms (nothing reads the socket meanwhile)."""
    import socket
    import threading
    import time

    from wire_fakes import CHAT_CHUNK, _head, _read_request, chunked, sse

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        conn, _ = srv.accept()
        _read_request(conn)
        conn.sendall(_head(200, "text/event-stream"))
        time.sleep(0.05)
        conn.sendall(chunked(sse(CHAT_CHUNK)))
        time.sleep(0.4)
        conn.sendall(chunked(sse(b"[DONE]")) + chunked(b""))
        time.sleep(0.2)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def block() -> None:
        gevent.sleep(0.02)
        time.sleep(0.3)  # the whole process (hub included) is busy

    client.USE_REACTOR = use_reactor
    try:
        blocker = gevent.spawn(block)
        rec, pool = attempt(srv.getsockname()[1], "ok", timeouts=Timeouts(connect_s=2, ttft_s=5, total_s=5))
        blocker.join()
        pool.close()
    finally:
        client.USE_REACTOR = True
        srv.close()
        thread.join(timeout=5)
    assert rec.complete and rec.first_token_ns is not None and rec.sent_ns is not None
    return (rec.first_token_ns - rec.sent_ns) / 1e6


@pytest.mark.serial  # a 150 ms margin for the server thread's wake-up: short, and timing-sensitive by nature
def test_first_token_is_stamped_when_its_bytes_arrived_not_when_the_process_read_them() -> None:
    """The reactor takes the kernel's receive time of the first token's bytes: a process busy for 300 ms
    does not add 300 ms to the TTFT (the per-greenlet path, stamping at recv, does)."""
    assert _ttft_while_blocked_ms(True) < 200  # 50 ms, plus a busy machine's scheduling of the server thread
    assert _ttft_while_blocked_ms(False) >= 300


def test_kernel_stamp_is_used_only_when_plausible() -> None:
    import socket
    import time

    from rushhour.loadgen.engine.wire.reactor import _TIMESPEC, SCM_TIMESTAMPNS, kernel_ns

    now = time.monotonic_ns()
    real = time.time_ns() - 5_000_000  # 5 ms ago on the wall clock
    anc = [(socket.SOL_SOCKET, SCM_TIMESTAMPNS, _TIMESPEC.pack(real // 10**9, real % 10**9))]
    assert now - 50_000_000 < kernel_ns(anc, now) < now
    future = time.time_ns() + 10**9
    assert kernel_ns([(socket.SOL_SOCKET, SCM_TIMESTAMPNS, _TIMESPEC.pack(future // 10**9, future % 10**9))],
                     now) == now
    assert kernel_ns([], now) == now


def test_a_stream_that_raises_in_the_reactor_fails_alone() -> None:
    """A surprise inside one stream's pass ends that stream with the error; the reactor reads on."""
    import time
    from types import SimpleNamespace

    from gevent import socket as gsocket

    from rushhour.loadgen.engine.wire.reactor import Stream

    class Parser:
        done = False
        received_any = True

        def __init__(self) -> None:
            self.fed = 0

        def feed(self, data: bytes, now: int) -> None:
            self.fed += len(data)
            if data == b"end":
                self.done = True

    calls = {"n": 0}

    def bad_phase(_: object) -> int:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("surprise")
        return 0

    far = time.monotonic_ns() + 10**10
    a, b = gsocket.socketpair()
    c, d = gsocket.socketpair()
    bad = Stream(a, Parser(), SimpleNamespace(interp=None), bad_phase, lambda *_: far, False)
    good = Stream(c, Parser(), SimpleNamespace(interp=None), lambda _: 0, lambda *_: far, False)
    loop = reactor()
    loop.add(bad)
    loop.add(good)
    b.sendall(b"x")
    bad.wait()
    assert isinstance(bad.error, RuntimeError)
    d.sendall(b"end")
    good.wait()
    assert good.error is None and good.parser.done
    for s in (a, b, c, d):
        s.close()
