"""tools/real_pass.py: the real pass's two pytest processes run at once, and one exit code says how they ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


# held (`make test`): a stand-in that notes its CPU policy and the hold file it was given, then waits for that file
# as tests/real/conftest.py does, and runs
HELD = """import os, sys, time
marks = sys.argv[sys.argv.index("-m") + 1]
hold = os.environ.get("RUSHHOUR_REAL_HOLD", "")
with open(os.path.join({notes!r}, marks.replace(" ", "_")), "w") as f:
    f.write(f"{{os.getpid()}} {{os.sched_getscheduler(0)}} {{hold}}")
while hold and not os.path.exists(hold):
    time.sleep(0.05)
print("ran", marks, flush=True)
sys.exit({codes}[marks])
"""


def _held_fake(tmp_path: Path, notes: Path, pinned: int = 0, others: int = 0) -> Path:
    codes = {"real and pinned_vllm": pinned, "real and not pinned_vllm": others}
    script = tmp_path / "held_pytest.py"
    script.write_text(HELD.format(codes=codes, notes=str(notes)))
    runner = tmp_path / "held_pytest"
    runner.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    runner.chmod(0o755)
    return runner


def _notes(notes: Path, count: int, timeout_s: float = 30.0) -> dict[str, list[str]]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = {p.name: p.read_text().split() for p in notes.iterdir() if p.read_text().count(" ") == 2}
        if len(found) == count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"the groups did not start: {sorted(p.name for p in notes.iterdir())}")


@pytest.mark.skipif(not real_pass.can_leave_idle(), reason="this machine does not let a process leave SCHED_IDLE")
def test_held_groups_start_at_once_at_the_idle_policy_and_print_only_after_the_hold(tmp_path: Path) -> None:
    notes, hold = tmp_path / "notes", tmp_path / "go"
    notes.mkdir()
    runner = _held_fake(tmp_path, notes, pinned=0, others=1)
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--hold-until", str(hold), str(runner)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        started = _notes(notes, 2)  # both groups are up while the hold lasts
        assert {policy for _, policy, _ in started.values()} == {str(os.SCHED_IDLE)}, started
        assert {held for _, _, held in started.values()} == {str(hold)}, started
        time.sleep(0.5)
        assert proc.poll() is None
        hold.touch()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.decode()
    assert proc.returncode == 1, text
    assert text.startswith("real pass: the pinned vLLM's tests (shown now)"), text  # nothing before the hold
    assert "ran real and pinned_vllm" in text and "ran real and not pinned_vllm" in text
    assert "exit 0 (the pinned vLLM's tests), 1 (the other engines' tests)" in text


@pytest.mark.skipif(not real_pass.can_leave_idle(), reason="this machine does not let a process leave SCHED_IDLE")
def test_a_held_pass_whose_shell_is_gone_interrupts_its_groups(tmp_path: Path) -> None:
    notes, hold = tmp_path / "notes", tmp_path / "go"
    notes.mkdir()
    runner = _held_fake(tmp_path, notes)
    # the shell starts the pass as a background job (SIGINT ignored, as make's recipe shell does) and exits
    shell = f"{sys.executable} {SCRIPT} --hold-until {hold} {runner} > {tmp_path / 'out'} 2>&1 & echo $!; sleep 2"
    pid = int(subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=30).stdout)
    started = _notes(notes, 2)
    end = time.monotonic() + 30
    alive = [int(p) for p, _, _ in started.values()] + [pid]
    while time.monotonic() < end and any(_alive(p) for p in alive):
        time.sleep(0.1)
    assert not any(_alive(p) for p in alive), (alive, (tmp_path / "out").read_text())
    assert not hold.exists() and "ran " not in (tmp_path / "out").read_text()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False
