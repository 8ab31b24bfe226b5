"""`rushhour doctor` as a user runs it: a real testbed process, and a stack that answers with an unknown text."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import rushhour

pytestmark = pytest.mark.e2e


@pytest.fixture
def testbed(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """`python -m rushhour.testbed` (profile from the test's parameter) on an ephemeral port, stopped by PID."""
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rushhour.testbed",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--profile",
            request.param,
            "--preset",
            "tiny",
            "--replicas",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "testbed did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text().strip()}"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def doctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return rushhour("doctor", "--out", str(tmp_path / "runs"), *args, timeout=300)


@pytest.mark.parametrize("testbed", ["vllm"], indirect=True)
def test_doctor_understands_a_vllm_like_stack(testbed: str, tmp_path: Path) -> None:
    done = doctor(tmp_path, "--target", testbed, "--profile", "vllm", "--fillers", "16")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS   priority polarity" in done.stdout
    assert "rushhour understands this stack" in done.stdout


@pytest.mark.parametrize("testbed", ["vllm"], indirect=True)
def test_doctor_catches_a_reversed_polarity(testbed: str, tmp_path: Path) -> None:
    # sglang's priority is "higher = earlier", vLLM's "lower = earlier": probing a vLLM stack with the
    # sglang profile sends every tier's priority the wrong way round
    done = doctor(tmp_path, "--target", testbed, "--profile", "sglang", "--fillers", "16")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL   priority polarity" in done.stdout


@pytest.mark.parametrize("testbed", ["vllm"], indirect=True)
def test_a_wrong_model_is_one_line_naming_the_served_ones(testbed: str, tmp_path: Path) -> None:
    done = doctor(tmp_path, "--target", testbed, "--profile", "vllm", "--model", "gpt-wrong")
    assert done.returncode == 2, done.stdout + done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert error == [f"error: model 'gpt-wrong' is not served by {testbed} (served: testbed): pass --model "
                     "testbed (or set target.model in the scenario)"], done.stderr
    assert "mapping" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()  # nothing was probed


class _Unknown(BaseHTTPRequestHandler):
    """Lists one model; answers every completion with a 503 whose text no profile knows."""

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": "m"}]}).encode() if self.path == "/v1/models" else b"nope"
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps({"error": {"message": "The frobnicator is saturated", "type": "Frob"}}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_doctor_names_an_answer_no_rule_knows(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unknown)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = doctor(
            tmp_path, "--target", f"http://127.0.0.1:{server.server_port}", "--profile", "vllm", "--fillers", "0"
        )
    finally:
        server.shutdown()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "frobnicator is saturated" in done.stdout and "FAIL   recognised answers" in done.stdout
    assert "Traceback" not in done.stderr


TOOLS_SCENARIO = """
name: doctor-tools
target: {{url: {url}, profile: vllm, model: testbed}}
tiers: [{{name: agents, priority: 5}}]
personas:
  - {{kind: agent_swarm, name: coders, tier: agents, agents: 1, tools: true}}
phases: [{{name: main, duration: 2s}}]
resilience:
  fallback: [{{name: backup, url: "{url}", profile: vllm}}]
"""


@pytest.mark.parametrize("testbed", ["vllm"], indirect=True)
def test_doctor_sends_one_tools_request_per_route(testbed: str, tmp_path: Path) -> None:
    scenario = tmp_path / "tools.yaml"
    scenario.write_text(TOOLS_SCENARIO.format(url=testbed))
    done = doctor(tmp_path, str(scenario), "--fillers", "0")
    assert "PASS   tools " in done.stdout and "PASS   tools (backup)" in done.stdout, done.stdout + done.stderr
    records = [json.loads(line) for p in (tmp_path / "runs").glob("doctor-*/records/*.jsonl")
               for line in p.read_text().splitlines()]
    tools = [r for r in records if r.get("persona") == "doctor-tools"]
    assert sorted(r["route"] for r in tools) == ["backup", "primary"]
