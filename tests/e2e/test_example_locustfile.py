"""The documented plain-Locust example runs against a real testbed, reaches it with tier headers, writes a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_plain_locust_with_rushhour_users(tmp_path: Path) -> None:
    port_file, ledger = tmp_path / "port", tmp_path / "ledger.jsonl"
    testbed = subprocess.Popen(
        [sys.executable, "-m", "testbed", "--port", "0", "--port-file", str(port_file), "--ledger", str(ledger),
         "--preset", "tiny", "--replicas", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        deadline = time.monotonic() + 60  # a loaded CI machine starts Python slowly
        while not port_file.exists():
            assert testbed.poll() is None and time.monotonic() < deadline, "the testbed did not start"
            time.sleep(0.05)
        port = int(port_file.read_text())
        # no fixed -t: the run's idle probes come first, and on a loaded CI machine they took most of a 12 s run
        # (its users then sent at 15 s and were cut off at once: nothing served). Locust runs until the testbed
        # served a chat request (or 120 s), then is stopped as a user stops it: SIGTERM, a clean quit.
        out, err = tmp_path / "locust.out", tmp_path / "locust.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            run = subprocess.Popen(
                [sys.executable, "-m", "locust", "-f", "examples/locustfile.py", "--headless", "-u", "4", "-r", "4",
                 "-t", "120s", "--host", f"http://127.0.0.1:{port}", "--only-summary",
                 "--rh-run-dir", str(tmp_path / "run")], cwd=REPO, stdout=stdout, stderr=stderr)
        try:
            while run.poll() is None and not _served_chat(ledger):
                time.sleep(0.2)
            run.send_signal(signal.SIGTERM)
            code = run.wait(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
    finally:
        os.kill(testbed.pid, signal.SIGTERM)
        testbed.wait(timeout=10)
    log = err.read_text(errors="replace")[-2000:]
    assert code in (0, 1), log  # 1: requests cut off by the stop count as failures
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    served = [x for x in lines if x["outcome"] == "served"]
    assert served, "no request was served\n" + log
    chat = [x for x in served if x["objective"] == "interactive"]
    assert chat and {x["priority"] for x in chat} == {100} and {x["tenant"] for x in chat} == {"team-a"}
    assert {x["objective"] for x in served} <= {"interactive", "batch-sheddable"}
    assert (tmp_path / "run" / "run.json").exists() and list((tmp_path / "run" / "records").glob("*.jsonl"))


def _served_chat(ledger: Path) -> bool:
    """Has the testbed served an interactive (chat) request yet? (its ledger: one JSON line per decision)"""
    if not ledger.exists():
        return False
    lines = [json.loads(x) for x in ledger.read_text().splitlines() if x.endswith("}")]
    return any(x["outcome"] == "served" and x["objective"] == "interactive" for x in lines)
