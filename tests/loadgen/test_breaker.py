"""Circuit breaker per route, with a fake clock: opens, fails fast, half-opens with one probe, closes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from rushhour.loadgen.breaker import CLOSED, HALF_OPEN, OPEN, RouteBreaker, is_breaker_failure
from rushhour.records.record import RequestRecord

ROOT = Path(__file__).resolve().parents[2]


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def rec(**kw: Any) -> RequestRecord:
    base: dict[str, Any] = dict(run_id="r", seq=1, request_id="q", logical_id="l", tier="t", tenant="x", persona="chat")
    base.update(kw)
    return RequestRecord(**base)


def make(fail_max: int = 3, reset: float = 10.0) -> tuple[RouteBreaker, FakeClock, list[tuple[Any, ...]]]:
    clock = FakeClock()
    changes: list[tuple[Any, ...]] = []
    b = RouteBreaker("primary", fail_max, reset, lambda *a: changes.append(a), clock=clock)
    return b, clock, changes


def test_opens_after_fail_max_including_timeouts() -> None:
    b, _, changes = make(fail_max=3)
    b.record(rec(status=200, client_timeout=True))  # a timeout is a failure
    b.record(rec(status=0, transport_error=True))
    assert b.state == CLOSED and b.failures == 2 and b.allow()
    b.record(rec(status=429, reason="rejected-saturated"))
    assert b.state == OPEN
    assert changes == [("primary", CLOSED, OPEN, "3 consecutive failures, last: 429 rejected-saturated")]


def test_success_resets_consecutive_count() -> None:
    b, _, changes = make(fail_max=2)
    b.record_failure("503")
    b.record_success()
    b.record_failure("503")
    assert b.state == CLOSED and b.failures == 1 and changes == []


def test_client_errors_do_not_count() -> None:
    b, _, _ = make(fail_max=1)
    b.record(rec(status=400))
    b.record(rec(not_sent=True))
    b.record(rec(status=200, cancelled=True))
    assert b.state == CLOSED
    assert not is_breaker_failure(rec(status=404))
    for r in (rec(status=529), rec(status=503), rec(status=500), rec(status=408), rec(status=200, in_band_error="x")):
        assert is_breaker_failure(r)


def test_fails_fast_while_open_then_half_opens_one_probe_and_closes() -> None:
    b, clock, changes = make(fail_max=1, reset=10.0)
    b.record_failure("timeout")
    assert b.state == OPEN
    clock.t += 9.9
    assert not b.allow() and not b.allow()
    assert b.rejected == 2
    clock.t += 0.2
    assert b.allow()  # the probe
    assert b.state == HALF_OPEN
    assert not b.allow()  # only one probe at a time
    b.record_success()
    assert b.state == CLOSED and b.allow() and b.allow()
    assert [c[1:3] for c in changes] == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]
    assert changes[1][3] == "reset_timeout" and changes[2][3] == "probe_succeeded"


def test_failed_probe_reopens_for_a_full_period() -> None:
    b, clock, changes = make(fail_max=2, reset=5.0)
    b.record_failure("503")
    b.record_failure("503")
    clock.t += 5.0
    assert b.allow()
    b.record(rec(status=200, client_timeout=True))
    assert b.state == OPEN and b.opens == 2
    assert changes[-1][1:] == (HALF_OPEN, OPEN, "probe_failed: timeout")
    clock.t += 4.9
    assert not b.allow()
    clock.t += 0.1
    assert b.allow()


def test_cancelled_probe_frees_the_slot() -> None:
    b, clock, _ = make(fail_max=1, reset=1.0)
    b.record_failure()
    clock.t += 1.0
    assert b.allow()
    b.record(rec(status=200, cancelled=True))
    assert b.state == HALF_OPEN and b.allow()


def test_late_results_while_open_are_ignored() -> None:
    b, clock, _ = make(fail_max=1, reset=10.0)
    b.record_failure()
    clock.t += 5
    b.record_success()  # an answer from before the breaker opened
    b.record_failure()  # does not extend the open period
    assert b.state == OPEN
    clock.t += 5
    assert b.allow()


def test_threads_share_one_breaker() -> None:
    b, _, changes = make(fail_max=1000)

    def hammer() -> None:
        for _ in range(500):
            b.record_failure("x")

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert b.state == OPEN and len(changes) == 1


def test_works_under_gevent_monkey_patching() -> None:
    """In a Locust-like process (gevent-patched locks), greenlets share the breaker without deadlock."""
    code = textwrap.dedent(
        """
        from gevent import monkey; monkey.patch_all()
        import gevent
        from rushhour.loadgen.breaker import RouteBreaker
        changes = []
        b = RouteBreaker("r", 5, 0.05, lambda *a: (changes.append(a[1:3]), gevent.sleep(0)))
        def user(i):
            for _ in range(20):
                if b.allow():
                    gevent.sleep(0.001)
                    b.record_failure("503")
                gevent.sleep(0.001)
        gevent.joinall([gevent.spawn(user, i) for i in range(20)], timeout=10, raise_error=True)
        assert b.state == "open" and b.rejected > 0, b.state
        gevent.sleep(0.06)
        assert b.allow() and b.state == "half_open", b.state
        b.record_success()
        assert b.state == "closed"
        print("ok", len(changes))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")
