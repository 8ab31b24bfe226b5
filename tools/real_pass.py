"""`make test`'s real pass: the pinned vLLM's tests, the other engines' tests and the long waiting tests at once.

Each real group runs as a pytest process of its own, one test at a time, and starts only its own engines
(tests/real/conftest.py), so the two groups' engine starts overlap and their runs go side by side on a core
each. After the start they take about three quarters of the two cores, so the tests marked ``beside_real``
(long runs of fixed length that mostly wait) run beside them on ``--beside-workers`` xdist workers (0: none)
instead of in the parallel pass. The pinned group's output is shown as it comes; the others' are kept in files
and shown when all have ended. A Ctrl-C reaches every process (they share the terminal's process group), and
this waits for all of them to stop their engines and servers before it exits.

Usage: python tools/real_pass.py [--beside-workers N] PYTEST [PYTEST_ARGS ...]
Exit: the first non-zero group's code, else 0 (5, pytest's "no tests", only when every group had none).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

PINNED = ("the pinned vLLM's tests", ["-m", "real and pinned_vllm"])
OTHERS = ("the other engines' tests", ["-m", "real and not pinned_vllm"])
BESIDE_MARKS = "beside_real and not real and not serial"
NO_TESTS = 5  # pytest's exit code when a selection is empty


def combined(codes: list[int]) -> int:
    """One exit code for the pass: 0 when every group passed or had no test, else the first failure."""
    if all(code == NO_TESTS for code in codes):
        return NO_TESTS
    return next((code for code in codes if code not in (0, NO_TESTS)), 0)


def groups(beside_workers: int) -> list[tuple[str, list[str]]]:
    """The pass's groups, each a name and its pytest arguments; the first is shown as it runs."""
    found = [PINNED, OTHERS]
    if beside_workers > 0:
        found.append((f"the long waiting tests on {beside_workers} workers",
                      ["-n", str(beside_workers), "--dist", "worksteal", "-m", BESIDE_MARKS]))
    return found


def wait_all(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """Every process's exit code; a Ctrl-C here waits on, while the children stop their servers."""
    codes = []
    for proc in procs:
        while True:
            try:
                codes.append(proc.wait())
                break
            except KeyboardInterrupt:  # the children had it too: let them tear down
                continue
    return codes


def parse(argv: list[str]) -> tuple[int, list[str]] | None:
    """(beside workers, the pytest command and its arguments), or None when the command is missing."""
    beside = 0
    if argv[:1] == ["--beside-workers"] and len(argv) >= 2 and argv[1].isdigit():
        beside, argv = int(argv[1]), argv[2:]
    return (beside, argv) if argv and not argv[0].startswith("-") else None


def main(argv: list[str]) -> int:
    parsed = parse(argv)
    if parsed is None:
        print("usage: real_pass.py [--beside-workers N] PYTEST [PYTEST_ARGS ...]", file=sys.stderr)
        return 2
    beside, (pytest, *args) = parsed
    (shown, shown_args), *kept = groups(beside)
    with tempfile.TemporaryDirectory(prefix="rushhour-real-pass-") as tmp:
        logs = [Path(tmp) / f"kept-{i}.log" for i in range(len(kept))]
        procs = []
        for (_, kept_args), log in zip(kept, logs, strict=True):
            # each session numbers its own temp folder and locks it while it runs (pytest prunes unlocked ones)
            with log.open("wb") as out:
                procs.append(subprocess.Popen([pytest, "-q", *kept_args, *args], stdout=out,
                                              stderr=subprocess.STDOUT))
        print(f"real pass: {shown} (shown now) beside {', '.join(name for name, _ in kept)} (shown when all end)",
              flush=True)
        procs.insert(0, subprocess.Popen([pytest, "-q", *shown_args, *args]))
        codes = wait_all(procs)
        for (name, _), log in zip(kept, logs, strict=True):
            print(f"real pass: {name}:", flush=True)
            sys.stdout.buffer.write(log.read_bytes())
            sys.stdout.flush()
    names = [shown, *(name for name, _ in kept)]
    print("real pass: exit " + ", ".join(f"{code} ({name})" for code, name in zip(codes, names, strict=True)),
          flush=True)
    return combined(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
