"""tools/real_pass.py: the real pass's pytest processes run at once, and one exit code says how they ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, load_script

SCRIPT = REPO / "tools" / "real_pass.py"
real_pass = load_script(SCRIPT)
PINNED, OTHERS, BESIDE = "real and pinned_vllm", "real and not pinned_vllm", real_pass.BESIDE_MARKS

# a stand-in for pytest: says which selection and arguments it got, takes 3 s, exits with its selection's code
FAKE = """import sys, time
marks = sys.argv[sys.argv.index("-m") + 1]
print("ran", marks, "with", " ".join(sys.argv[1:]), "at", time.monotonic(), flush=True)
time.sleep(3.0)
sys.exit({codes}[marks])
"""


def _fake(tmp_path: Path, codes: dict[str, int]) -> Path:
    script = tmp_path / "fake_pytest.py"
    script.write_text(FAKE.format(codes=codes))
    runner = tmp_path / "fake_pytest"
    runner.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    runner.chmod(0o755)
    return runner


def _ran(stdout: str) -> dict[str, tuple[str, float]]:
    """Each selection the fake ran: its whole argument line and when it started."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("ran "):
            head, at = line.rsplit(" at ", 1)
            marks, argv = head[len("ran "):].split(" with ", 1)
            found[marks] = (argv, float(at))
    return found


@pytest.mark.parametrize(("codes", "expected"), [
    ([0, 0], 0), ([1, 0], 1), ([0, 1], 1), ([2, 1], 2), ([5, 0], 0), ([0, 5], 0), ([5, 5], 5), ([5, 3], 3),
    ([0, 0, 1], 1), ([0, 0, 5], 0)])
def test_one_exit_code_for_every_group(codes: list[int], expected: int) -> None:
    assert real_pass.combined(codes) == expected


def test_every_group_runs_at_once_and_every_output_is_shown(tmp_path: Path) -> None:
    runner = _fake(tmp_path, {PINNED: 0, OTHERS: 1, BESIDE: 0})
    done = subprocess.run([sys.executable, str(SCRIPT), "--beside-workers", "2", str(runner), "--durations=5"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    ran = _ran(done.stdout)
    assert set(ran) == {PINNED, OTHERS, BESIDE}, done.stdout
    assert all(argv.endswith("--durations=5") for argv, _ in ran.values())  # PYTEST_ARGS reach every group
    assert ran[BESIDE][0].startswith("-q -n 2 --dist worksteal -m")  # the long waiting tests on their workers
    starts = [at for _, at in ran.values()]
    assert max(starts) - min(starts) < 3.0, starts  # side by side: one after another they would be >= 3 s apart
    assert ("exit 0 (the pinned vLLM's tests), 1 (the other engines' tests), 0 (the long waiting tests on 2 "
            "workers)") in done.stdout


def test_without_beside_workers_only_the_real_groups_run(tmp_path: Path) -> None:
    runner = _fake(tmp_path, {PINNED: 0, OTHERS: 0})
    done = subprocess.run([sys.executable, str(SCRIPT), str(runner)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(_ran(done.stdout)) == {PINNED, OTHERS}


@pytest.mark.parametrize("argv", [[], ["--beside-workers"], ["--beside-workers", "x", "pytest"],
                                  ["--beside-workers", "2"]])
def test_a_missing_command_is_a_usage_line(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("usage: real_pass.py"), done.stderr
