"""`rushhour doctor` against a real vLLM 0.32 with priority scheduling: it sees the polarity, and a wrong one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def doctor(url: str, profile: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rushhour.cli", "doctor", "--target", url, "--profile", profile, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_doctor_on_real_vllm(vllm_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    done = doctor(vllm_server.url, "vllm", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "PASS   model",
        "PASS   streams",
        "PASS   usage",
        "PASS   priority polarity",
        "PASS   metrics",
        "PASS   recognised answers",
    ):
        assert line in done.stdout, done.stdout
    # the sglang profile sends priority as is: on vLLM (lower = earlier) the tiers run backwards
    wrong = doctor(vllm_server.url, "sglang", tmp_path)
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "FAIL   priority polarity" in wrong.stdout
