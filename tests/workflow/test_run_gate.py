"""`rushhour run --gate`: the run's exit code is the gate's, in one step (a CI job needs no second command)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import run, rushhour, scenario, write_scenario

from .wf_helpers import machine_invalid


def _run(tmp_path: Path, text: str, *args: str) -> tuple[Path, int, str, str]:
    done, run_dir, _ = run(text, tmp_path, *args)
    return run_dir, done.returncode, done.stdout, done.stderr


@pytest.mark.e2e
def test_a_failing_tier_fails_the_run_and_writes_the_gates_files(tmp_path: Path) -> None:
    junit, markdown = tmp_path / "junit.xml", tmp_path / "summary.md"
    markdown.write_text("earlier step\n")
    run_dir, code, stdout, stderr = _run(tmp_path, scenario(seconds=8, ttft_p50_ms=1), "--gate",
                                         "--junit", str(junit), "--markdown", str(markdown))
    expected = 2 if machine_invalid(run_dir) else 1  # a loaded machine's generator lag: invalid, never a pass
    assert code == expected, stdout + stderr
    assert code == json.loads((run_dir / "summary.json").read_text())["exit_code"]
    assert code == rushhour("gate", str(run_dir)).returncode  # the same answer as the separate gate
    assert "<failure" in junit.read_text() and "ttft_ms.p50" in junit.read_text()
    text = markdown.read_text()
    assert text.startswith("earlier step\n") and "FAIL" in text  # appended, as a CI step summary collects
    assert (run_dir / "report.html").exists() and "HTML report:" in stdout


@pytest.mark.e2e
def test_a_passing_run_gates_zero_and_no_report_still_judges(tmp_path: Path) -> None:
    run_dir, code, stdout, stderr = _run(tmp_path, scenario(seconds=8, ttft_p50_ms=20_000, drop=0.9), "--gate",
                                         "--no-report")
    expected = 2 if machine_invalid(run_dir) else 0
    assert code == expected, stdout + stderr
    assert (run_dir / "summary.json").exists() and not (run_dir / "report.html").exists()
    assert "PASS" in stdout or expected == 2, stdout


@pytest.mark.parametrize("args, words", [
    (["--junit", "j.xml"], "give --gate with them"),
    (["--markdown", "m.md"], "give --gate with them"),
    (["--gate", "--dry-run"], "a dry run sends nothing"),
])
def test_gate_options_that_cannot_judge_are_one_line_errors(tmp_path: Path, args: list[str], words: str) -> None:
    path = write_scenario(tmp_path, seconds=8)
    res = rushhour("run", str(path), "--out", str(tmp_path / "runs"), *args)
    assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
