"""A run signals only the processes it started, never a process or thread that got one of their PIDs later.

Seen in CI: the runner remembered Locust's descendants as bare PIDs and SIGKILLed the ones still "alive"
after the run; one number had gone to a request thread of the LiteLLM proxy under test, and
``kill(tid, SIGKILL)`` ended the whole proxy (the next scrape was refused).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from rushhour.loadgen import procs

NEXT_PID = Path("/proc/sys/kernel/ns_last_pid")
# A process that starts a thread on each input line and prints the thread's id (its TID).
THREADER = ("import sys, threading, time\n"
            "for _ in sys.stdin:\n"
            "    t = threading.Thread(target=time.sleep, args=(60,), daemon=True); t.start()\n"
            "    print(t.native_id, flush=True)\n")


def _stale(tries: int = 20) -> tuple[int, psutil.Process]:
    """A child seen alive (as the runner sees Locust's), then gone and reaped: its PID is free again."""
    child = subprocess.Popen(["sleep", "30"])
    seen = psutil.Process(child.pid)
    child.kill()
    child.wait()
    # psutil tells processes apart by start time in clock ticks (10 ms): a reuse within the same tick
    # would look like the same process. Real reuse comes seconds later; wait out a few ticks here.
    time.sleep(0.05)
    return child.pid, seen


def _claim(pid: int, start: Callable[[], tuple[int, object]]) -> object:
    """Make the next PID the kernel hands out be ``pid`` (root only) and start something on it."""
    if not os.access(NEXT_PID, os.W_OK):
        pytest.skip("needs root to choose the next PID (/proc/sys/kernel/ns_last_pid)")
    for _ in range(500):  # another process may take the number first on a busy machine: try again
        NEXT_PID.write_text(str(pid - 1))
        got, handle = start()
        if got == pid:
            return handle
    raise AssertionError(f"could not reuse PID {pid} in 500 tries (last {got})")


def test_a_reused_pid_held_by_another_process_is_not_signalled() -> None:
    pid, seen = _stale()

    def start() -> tuple[int, subprocess.Popen[bytes]]:
        proc = subprocess.Popen(["sleep", "30"])
        if proc.pid != pid:
            proc.kill()
            proc.wait()
        return proc.pid, proc

    other = _claim(pid, start)
    assert isinstance(other, subprocess.Popen)
    try:
        procs.send({pid: seen}, signal.SIGKILL)
        procs.reap({pid: seen}, grace_s=0.2)
        assert other.poll() is None, "the runner killed a process that merely got a reused PID"
    finally:
        other.kill()
        other.wait()


def test_a_reused_pid_held_by_a_thread_does_not_kill_its_process() -> None:
    victim = subprocess.Popen([sys.executable, "-c", THREADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert victim.stdin is not None and victim.stdout is not None
    pid, seen = _stale()

    def start() -> tuple[int, None]:
        victim.stdin.write("go\n")  # type: ignore[union-attr]
        victim.stdin.flush()  # type: ignore[union-attr]
        return int(victim.stdout.readline()), None  # type: ignore[union-attr]

    try:
        _claim(pid, start)
        os.kill(pid, 0)  # the kernel answers for a thread id as for a process (psutil.Process(tid) too)
        assert psutil.Process(pid).ppid() == os.getpid()  # ...and it names the thread's process
        procs.reap({pid: seen}, grace_s=0.2)
        time.sleep(0.2)
        assert victim.poll() is None, "SIGKILL to a reused thread id ended the process that owns the thread"
    finally:
        victim.kill()
        victim.wait()


def test_descendants_that_outlive_their_parent_are_killed_after_the_grace() -> None:
    code = "import subprocess, sys; p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); sys.stdin.read()"
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None and parent.stdin is not None
    orphan_pid = int(parent.stdout.readline())
    seen = procs.descendants(parent.pid)
    assert orphan_pid in seen
    parent.stdin.close()
    parent.wait()
    procs.reap(seen, grace_s=0.2)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and procs.alive(seen[orphan_pid]):
        time.sleep(0.05)
    assert not procs.alive(seen[orphan_pid]), "a descendant that outlived its parent was left running"
