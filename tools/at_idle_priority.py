"""Run a command at the lowest CPU priority: `make test`'s unit pass, beside the timing and real passes.

SCHED_IDLE: the kernel runs the command only on what normal tasks leave of the cores, preempts it at once for any
of them and counts a core that runs only idle tasks as free when it places a waking one; so the timing-sensitive
tests and the real engines beside it keep their cores. Where SCHED_IDLE is missing, nice 19. Ctrl-C goes back to
its default first: a shell's background job inherits it ignored, and a Python started with SIGINT ignored never
raises KeyboardInterrupt (so pytest would not stop).

Usage: python tools/at_idle_priority.py COMMAND [ARGS ...]   (replaces itself with COMMAND)
"""

from __future__ import annotations

import os
import shutil
import signal
import sys


def lowest_priority() -> str:
    """Put this process at the lowest CPU priority; which one it got."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        os.nice(19 - os.nice(0))
        return "nice 19"


def main(argv: list[str]) -> int:
    if not argv or shutil.which(argv[0]) is None:
        print(f"at_idle_priority.py: {'no command' if not argv else repr(argv[0]) + ' is not a command'}",
              file=sys.stderr)
        return 2
    lowest_priority()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(argv[0], argv)
    return 127  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
