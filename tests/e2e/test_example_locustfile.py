"""The documented plain-Locust example runs against a real testbed and reaches it with tier headers."""

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
        for _ in range(200):
            if port_file.exists():
                break
            time.sleep(0.05)
        port = int(port_file.read_text())
        run = subprocess.run(
            [sys.executable, "-m", "locust", "-f", "examples/locustfile.py", "--headless", "-u", "4", "-r", "4",
             "-t", "4s", "--host", f"http://127.0.0.1:{port}", "--only-summary"],
            cwd=REPO, capture_output=True, text=True, timeout=60)
    finally:
        os.kill(testbed.pid, signal.SIGTERM)
        testbed.wait(timeout=10)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    served = [x for x in lines if x["outcome"] == "served"]
    assert served, "no request was served"
    assert {x["objective"] for x in served} == {"interactive"} and {x["priority"] for x in served} == {100}
    assert {x["tenant"] for x in served} == {"team-a"}
