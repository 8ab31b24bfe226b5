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


NO_QUEUE = "a trial saw no queueing"


def doctor_queued(url: str, profile: str, out: Path, tries: int = 3) -> subprocess.CompletedProcess[str]:
    """The doctor, run again while a polarity trial saw no queue (then it rightly says only "info").

    On a quiet machine the 8 fillers (the tiny model decodes ~3 ms a token and may stop early at EOS) now and
    then all but end within the pair's head start: a seat is free and the pair does not wait. More fillers
    do not fit this server's queue limits (12 refused the pair with a 503), so the trial is repeated instead.
    """
    for attempt in range(tries):
        done = doctor(url, profile, out / f"try-{attempt}")
        if NO_QUEUE not in done.stdout:
            break
    return done


def test_doctor_on_real_vllm(vllm_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    done = doctor_queued(vllm_server.url, "vllm", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "PASS   model",
        "PASS   streams",
        "PASS   usage",
        "PASS   priority polarity",
        "PASS   metrics",
        "PASS   recognised answers",
        "PASS   server timing",  # engines/serve.py starts vLLM with --enable-per-request-metrics
    ):
        assert line in done.stdout, done.stdout
    # the sglang profile sends priority as is: on vLLM (lower = earlier) the tiers run backwards
    wrong = doctor_queued(vllm_server.url, "sglang", tmp_path / "sglang")
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "FAIL   priority polarity" in wrong.stdout
