"""`make test`'s real pass: the pinned vLLM's tests and the other engines' tests as two pytest processes at once.

Each process starts only its own group's engines (tests/real/conftest.py), so the two groups' engine starts
overlap and their runs go side by side on a core each. The pinned group's output is shown as it comes; the
other group's is kept in a file and shown when both have ended. A Ctrl-C reaches both (they share the
terminal's process group), and this waits for both to stop their engines before it exits.

``--hold-until FILE`` (`make test`, started beside its timing pass): both processes start at once at the lowest
CPU priority (SCHED_IDLE), start their engines with what the timing pass leaves of the cores, and run their first
test only once FILE exists, back on the normal policy. Nothing is printed before that. Where leaving SCHED_IDLE is
not allowed (it takes root or an RLIMIT_NICE of 20), nothing starts before FILE exists.

Usage: python tools/real_pass.py [--hold-until FILE] PYTEST [PYTEST_ARGS ...]
exit: the first non-zero group's code, else 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

GROUPS = {"the pinned vLLM's tests": "real and pinned_vllm", "the other engines' tests": "real and not pinned_vllm"}
NO_TESTS = 5  # pytest's exit code when a selection is empty
HOLD_ENV = "RUSHHOUR_REAL_HOLD"  # tests/real/conftest.py: start the engines now, the first test once the file exists
POLL_S = 0.2
USAGE = "usage: real_pass.py [--hold-until FILE] PYTEST [PYTEST_ARGS ...]"


def combined(codes: list[int]) -> int:
    """One exit code for the pass: 0 when every group passed or had no test, else the first failure."""
    if all(code == NO_TESTS for code in codes):
        return NO_TESTS
    return next((code for code in codes if code not in (0, NO_TESTS)), 0)


def wait_all(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """Every process's exit code; a Ctrl-C here waits on, while the children stop their engines."""
    codes = []
    for proc in procs:
        while True:
            try:
                codes.append(proc.wait())
                break
            except KeyboardInterrupt:  # the children had it too: let them tear down
                continue
    return codes


def can_leave_idle() -> bool:
    """Whether a process of ours may go from SCHED_IDLE back to the normal policy (tried in a child)."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    probe = ("import os; p = os.sched_param(0); os.sched_setscheduler(0, os.SCHED_IDLE, p); "
             "os.sched_setscheduler(0, os.SCHED_OTHER, p)")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def _idle_child() -> None:
    """In the child, before exec: the idle CPU policy, and Ctrl-C back to its default (a shell's background job
    inherits it ignored, and a Python that starts with SIGINT ignored never raises KeyboardInterrupt)."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    signal.signal(signal.SIGINT, signal.SIG_DFL)


PARENT = os.getppid()  # the shell that started this pass, read first thing (once it is gone we are reparented)


def await_hold(path: Path, procs: list[subprocess.Popen[bytes]]) -> bool:
    """Wait for ``path``; False when the shell that started this pass is gone first (the children are then
    interrupted and waited for: they stop their engines)."""
    parent = PARENT
    while not path.exists():
        if os.getppid() != parent:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            wait_all(procs)
            return False
        time.sleep(POLL_S)
    return True


def follow(log: Path, proc: subprocess.Popen[bytes], out: BinaryIO) -> None:
    """Copy ``log`` to ``out`` as it grows, until ``proc`` has ended and the log is read to its end (a Ctrl-C
    reached ``proc`` too: this goes on copying what it prints while it stops its engines)."""
    with log.open("rb") as src:
        while True:
            try:
                ended = proc.poll() is not None
                chunk = src.read()
                if chunk:
                    out.write(chunk)
                    out.flush()
                elif ended:
                    return
                else:
                    time.sleep(POLL_S)
            except KeyboardInterrupt:
                continue


def run_groups(pytest: str, args: list[str], hold: Path | None) -> int:
    (shown, shown_marks), (kept, kept_marks) = GROUPS.items()
    env = {**os.environ, HOLD_ENV: str(hold)} if hold is not None else None
    preexec: Callable[[], None] | None = _idle_child if hold is not None else None
    with tempfile.TemporaryDirectory(prefix="rushhour-real-pass-") as tmp:
        kept_log, shown_log = Path(tmp) / "kept.log", Path(tmp) / "shown.log"
        with kept_log.open("wb") as kept_out, shown_log.open("wb") as shown_out:
            # each session numbers its own temp folder and locks it while it runs (pytest prunes unlocked ones)
            background = subprocess.Popen([pytest, "-q", "-m", kept_marks, *args], stdout=kept_out,
                                          stderr=subprocess.STDOUT, env=env, preexec_fn=preexec)
            # held, the shown group's output waits in a file too: nothing may print beside the timing pass
            foreground = subprocess.Popen([pytest, "-q", "-m", shown_marks, *args], env=env, preexec_fn=preexec,
                                          stdout=shown_out if hold else None,
                                          stderr=subprocess.STDOUT if hold else None)
            procs = [foreground, background]
            if hold is not None and not await_hold(hold, procs):
                return 130
            print(f"real pass: {shown} (shown now) beside {kept} (shown when both end)"
                  + (" (their engines started beside the timing pass)" if hold is not None else ""), flush=True)
            if hold is not None:
                follow(shown_log, foreground, sys.stdout.buffer)
            codes = wait_all(procs)
        print(f"real pass: {kept}:", flush=True)
        sys.stdout.buffer.write(kept_log.read_bytes())
        sys.stdout.flush()
    print(f"real pass: exit {codes[0]} ({shown}), {codes[1]} ({kept})", flush=True)
    return combined(codes)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # started as a shell's background job: ignored
    hold: Path | None = None
    if argv[:1] == ["--hold-until"]:
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        hold, argv = Path(argv[1]), argv[2:]
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    pytest, *args = argv
    if shutil.which(pytest) is None:  # checked before either starts: a group must never run on alone, unseen
        print(f"real_pass.py: {pytest!r} is not an executable pytest", file=sys.stderr)
        return 2
    if hold is not None and not can_leave_idle():
        # an engine left at the idle policy would be starved by its own load generator: start after the hold
        if not await_hold(hold, []):
            return 130
        hold = None
    return run_groups(pytest, args, hold)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
