"""tools/at_idle_priority.py: `make test`'s unit pass runs at the idle CPU policy, and a Ctrl-C still stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from support import REPO

SCRIPT = REPO / "tools" / "at_idle_priority.py"
PROBE = ("import os, signal; "
         "print(os.sched_getscheduler(0), signal.getsignal(signal.SIGINT) is signal.default_int_handler)")


def test_the_command_runs_at_the_idle_policy_with_ctrl_c_restored() -> None:
    # started as a shell's background job is: SIGINT ignored
    done = subprocess.run([sys.executable, str(SCRIPT), sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0, done.stderr
    policy, interruptible = done.stdout.split()
    assert int(policy) == os.SCHED_IDLE and interruptible == "True", done.stdout


def test_no_command_is_one_line_and_exit_2() -> None:
    for argv in ([], ["no-such-command-here"]):
        done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
