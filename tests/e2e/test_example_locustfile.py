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

from .locust_helpers import locust_until_chat_served

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_plain_locust_with_rushhour_users(tmp_path: Path) -> None:
    port_file, ledger = tmp_path / "port", tmp_path / "ledger.jsonl"
    testbed = subprocess.Popen(
        [sys.executable, "-m", "rushhour.testbed", "--port", "0", "--port-file", str(port_file), "--ledger", str(ledger),
         "--preset", "tiny", "--replicas", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        deadline = time.monotonic() + 60  # a loaded CI machine starts Python slowly
        while not port_file.exists():
            assert testbed.poll() is None and time.monotonic() < deadline, "the testbed did not start"
            time.sleep(0.05)
        port = int(port_file.read_text())
        err = tmp_path / "locust.err"
        code = locust_until_chat_served(
            [sys.executable, "-m", "locust", "-f", "examples/locustfile.py", "--headless", "-u", "4", "-r", "4",
             "-t", "120s", "--host", f"http://127.0.0.1:{port}", "--only-summary",
             "--rh-run-dir", str(tmp_path / "run")], ledger, err, cwd=REPO)
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

