"""Agents offering tools to a real vLLM 0.32 without a tool-call parser: one named cause, and a failing doctor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rushhour.stacks.vllm import TOOLS_REFUSED

from .helpers import ROOT, SCENARIOS, attempts, run_rushhour

SCENARIO = SCENARIOS / "vllm-agents-tools.yaml"


def test_tools_refused_by_real_vllm_are_named_once(vllm_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the audit: every call refused with vLLM's 400, classed failed (not served), and one finding names the fix
    summary = run_rushhour(SCENARIO, vllm_server.url, tmp_path / "run")
    failed = attempts(summary, "agents", "failed")
    assert failed > 0 and attempts(summary, "agents", "served") == 0, summary["_stdout"]
    named = [f for f in summary["findings"] if f["kind"] == "named_failure"]
    assert len(named) == 1, summary["findings"]
    assert named[0]["data"]["cause"] == TOOLS_REFUSED and named[0]["data"]["count"] == failed
    assert named[0]["data"]["status"] == 400
    # the doctor: one tools request per route, a failing check with the fix, exit 1
    done = subprocess.run(
        [sys.executable, "-m", "rushhour.cli", "doctor", str(SCENARIO), "--target", vllm_server.url,
         "--fillers", "0", "--out", str(tmp_path / "doctor")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "250"}, check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    line = next((ln for ln in done.stdout.splitlines() if "FAIL" in ln and "tools" in ln), "")
    assert "server refuses tools: start vLLM with --enable-auto-tool-choice --tool-call-parser" in line, done.stdout
    assert "PASS   tier agents" in done.stdout, done.stdout  # the tier itself (no tools) is accepted
