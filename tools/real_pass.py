"""`make test`'s real pass: the pinned vLLM's tests and the other engines' tests as two pytest processes at once.

Each process starts only its own group's engines (tests/real/conftest.py), so the two groups' engine starts
overlap and their runs go side by side on a core each. The pinned group's output is shown as it comes; the
other group's is kept in a file and shown when both have ended. A Ctrl-C reaches both (they share the
terminal's process group), and this waits for both to stop their engines before it exits.

Usage: python tools/real_pass.py PYTEST [PYTEST_ARGS ...]   exit: the first non-zero group's code, else 0.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GROUPS = {"the pinned vLLM's tests": "real and pinned_vllm", "the other engines' tests": "real and not pinned_vllm"}
NO_TESTS = 5  # pytest's exit code when a selection is empty


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


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: real_pass.py PYTEST [PYTEST_ARGS ...]", file=sys.stderr)
        return 2
    pytest, *args = argv
    if shutil.which(pytest) is None:  # checked before either starts: a group must never run on alone, unseen
        print(f"real_pass.py: {pytest!r} is not an executable pytest", file=sys.stderr)
        return 2
    (shown, shown_marks), (kept, kept_marks) = GROUPS.items()
    with tempfile.TemporaryDirectory(prefix="rushhour-real-pass-") as tmp:
        log = Path(tmp) / "kept.log"
        with log.open("wb") as out:
            # each session numbers its own temp folder and locks it while it runs (pytest prunes unlocked ones)
            background = subprocess.Popen([pytest, "-q", "-m", kept_marks, *args], stdout=out,
                                          stderr=subprocess.STDOUT)
            print(f"real pass: {shown} (shown now) beside {kept} (shown when both end)", flush=True)
            foreground = subprocess.Popen([pytest, "-q", "-m", shown_marks, *args])
            codes = wait_all([foreground, background])
        print(f"real pass: {kept}:", flush=True)
        sys.stdout.buffer.write(log.read_bytes())
        sys.stdout.flush()
    print(f"real pass: exit {codes[0]} ({shown}), {codes[1]} ({kept})", flush=True)
    return combined(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
