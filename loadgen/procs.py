"""Processes a run started, held by identity (PID and start time), so a reused PID is never signalled.

A PID remembered as a number outlives its process: once Locust's helper exits, Linux hands the number to
the next process or *thread* anywhere on the machine, and ``kill(tid, SIGKILL)`` ends a thread's whole
process. A run that SIGKILLed "its" stale PIDs at the end once killed a LiteLLM proxy under test (one of
its request threads had the number). ``psutil.Process`` keeps the start time and refuses to signal a
process that is not the one it saw.
"""

from __future__ import annotations

import contextlib
import signal
import time

import psutil

Procs = dict[int, psutil.Process]


def descendants(pid: int) -> Procs:
    """Every live descendant of ``pid`` (none when it is gone), keyed by PID."""
    try:
        return {c.pid: c for c in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return {}


def remember(seen: Procs, more: Procs) -> None:
    """Add ``more`` to ``seen``, keeping the first identity seen for a PID (a later one is another process)."""
    for pid, proc in more.items():
        seen.setdefault(pid, proc)


def alive(proc: psutil.Process) -> bool:
    """The very process we saw is still running and not a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def send(procs: Procs, sig: int) -> None:
    """Signal each process that is still the one we saw (psutil checks the start time first)."""
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def reap(procs: Procs, grace_s: float = 5.0) -> None:
    """Give the processes ``grace_s`` to end on their own, then SIGKILL those still running."""
    deadline = time.monotonic() + grace_s
    left = {pid: p for pid, p in procs.items() if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {pid: p for pid, p in left.items() if alive(p)}
    send(left, signal.SIGKILL)
