"""Plain `locust -f examples/locustfile.py --headless -t 10s` ends green: the requests its stop cancels are
recorded `cancelled` in the shards (the audit counts them) but are not Locust failures (before: exit 1)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_locust_run_time_exits_zero_with_requests_in_flight_at_the_stop(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    # an L4 preset: a chat answer takes seconds, so requests are in flight when -t ends the test
    testbed = subprocess.Popen(
        [sys.executable, "-m", "rushhour.testbed", "--port", "0", "--port-file", str(port_file), "--preset", "l4-llama8b",
         "--replicas", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert testbed.poll() is None and time.monotonic() < deadline, "the testbed did not start"
            time.sleep(0.05)
        port = int(port_file.read_text())
        run_dir = tmp_path / "run"
        locust = subprocess.run(
            [sys.executable, "-m", "locust", "-f", "examples/locustfile.py", "--headless", "-u", "6", "-r", "6",
             "-t", "10s", "--host", f"http://127.0.0.1:{port}", "--only-summary", "--rh-run-dir", str(run_dir)],
            cwd=REPO, capture_output=True, text=True, timeout=120)
    finally:
        testbed.send_signal(signal.SIGTERM)
        testbed.wait(timeout=10)
    log = locust.stderr[-3000:]
    records = [json.loads(line) for path in (run_dir / "records").glob("*.jsonl")
               for line in path.read_text().splitlines() if line.strip()]
    requests = [r for r in records if r.get("kind") == "request"]
    cancelled = [r for r in requests if r.get("cancelled")]
    assert cancelled, "no request was in flight at the stop: the case is not tested\n" + log
    assert any(r.get("status") == 200 and r.get("complete") for r in requests), log
    assert locust.returncode == 0, log
    assert "cancelled" not in log, log  # not one of Locust's failures
    assert json.loads((run_dir / "run.json").read_text())["stop_reason"] == "completed"
