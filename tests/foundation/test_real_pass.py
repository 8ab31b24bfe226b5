"""tools/real_pass.py: the real pass's two pytest processes run at once, and one exit code says how they ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, load_script

SCRIPT = REPO / "tools" / "real_pass.py"
real_pass = load_script(SCRIPT)

# a stand-in for pytest: says which selection it got, takes 3 s, exits with the code its selection is given
FAKE = """import sys, time
marks = sys.argv[sys.argv.index("-m") + 1]
print("ran", marks, "with", " ".join(sys.argv[sys.argv.index("-m") + 2:]), "at", time.monotonic(), flush=True)
time.sleep(3.0)
sys.exit({codes}[marks])
"""


def _fake(tmp_path: Path, pinned: int, others: int) -> Path:
    codes = {"real and pinned_vllm": pinned, "real and not pinned_vllm": others}
    script = tmp_path / "fake_pytest.py"
    script.write_text(FAKE.format(codes=codes))
    runner = tmp_path / "fake_pytest"
    runner.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    runner.chmod(0o755)
    return runner


@pytest.mark.parametrize(("codes", "expected"), [
    ([0, 0], 0), ([1, 0], 1), ([0, 1], 1), ([2, 1], 2), ([5, 0], 0), ([0, 5], 0), ([5, 5], 5), ([5, 3], 3)])
def test_one_exit_code_for_both_groups(codes: list[int], expected: int) -> None:
    assert real_pass.combined(codes) == expected


def test_both_groups_run_at_once_and_both_outputs_are_shown(tmp_path: Path) -> None:
    runner = _fake(tmp_path, pinned=0, others=1)
    done = subprocess.run([sys.executable, str(SCRIPT), str(runner), "--durations=5"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("ran ")]
    assert [line.split(" with ")[0] for line in lines] == ["ran real and pinned_vllm", "ran real and not pinned_vllm"]
    assert all(line.split(" with ")[1].startswith("--durations=5 at") for line in lines)  # PYTEST_ARGS reach both
    starts = [float(line.rsplit(" at ", 1)[1]) for line in lines]
    assert abs(starts[0] - starts[1]) < 3.0, starts  # side by side: one after the other they would be >= 3 s apart
    assert "exit 0 (the pinned vLLM's tests), 1 (the other engines' tests)" in done.stdout


@pytest.mark.parametrize("argv", [[], ["no-such-pytest-here"]])
def test_no_pytest_to_run_is_one_line_and_starts_nothing(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and "real pass:" not in done.stdout, done.stdout
