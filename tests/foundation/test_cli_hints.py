"""Common mistakes are one line, exit 2, that say what to do: a busy port, a mistyped built-in name, piped help."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import rushhour

REPO = Path(__file__).resolve().parents[2]


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "debug" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds open (listening), so whoever binds it next finds it in use."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_on_a_busy_port_says_pass_port(busy_port: int) -> None:
    done = rushhour("serve", "--port", str(busy_port), timeout=60, script=True)
    assert _one_error_line(done) == f"error: port {busy_port} is in use: pass --port N (0 picks a free one)"


def test_the_testbed_alone_on_a_busy_port_says_pass_port(busy_port: int) -> None:
    done = subprocess.run([sys.executable, "-m", "rushhour.testbed", "--port", str(busy_port)], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert _one_error_line(done) == f"error: port {busy_port} is in use: pass --port N (0 picks a free one)"


def test_a_master_on_a_busy_port_says_pass_master_port(busy_port: int, tmp_path: Path) -> None:
    done = rushhour("run", "ci-smoke", "--expect-workers", "1", "--master-port", str(busy_port),
                     "--out", str(tmp_path / "runs"), script=True)
    assert _one_error_line(done) == f"error: port {busy_port} is in use: pass --master-port N"
    assert not (tmp_path / "runs").exists()  # refused before a run folder was made


@pytest.mark.parametrize("verb", [
    ["run", "demoo", "--dry-run"],
    ["scenario", "check", "demoo"],
    ["simulate", "demoo"],
    ["plan", "demoo"],
    ["sweep", "demoo"],
    ["doctor", "demoo", "--target", "http://127.0.0.1:9"],
    ["k8s", "demoo", "--workers", "2", "--target", "http://10.0.0.1:8000"],
])
def test_a_mistyped_built_in_name_gets_a_did_you_mean(verb: list[str]) -> None:
    line = _one_error_line(rushhour(*verb, script=True))
    assert line.startswith("error: no scenario file 'demoo': did you mean 'demo'? (built-in scenarios: "), line


def test_k8s_takes_a_built_in_name_like_every_other_verb() -> None:
    done = rushhour("k8s", "ci-smoke", "--workers", "2", "--target", "http://10.0.0.1:8000", script=True)
    assert done.returncode == 0, done.stderr
    assert "kind: ConfigMap" in done.stdout and "name: ci-smoke" in done.stdout


def test_piped_help_is_as_wide_as_the_piped_tables() -> None:
    done = rushhour("run", "--help", columns=None, script=True)
    assert done.returncode == 0, done.stderr
    # at Rich's 80 columns this help text was cut over three lines
    assert "override target URL ('testbed' for the embedded one)" in done.stdout
    narrow = rushhour("run", "--help", columns=80, script=True)  # a COLUMNS the user set is kept
    assert "override target URL ('testbed' for the embedded one)" not in narrow.stdout


@pytest.mark.parametrize("verb", [
    ["run", "demo", "--profile", "vLLM", "--dry-run"],
    ["doctor", "--target", "http://127.0.0.1:9", "--profile", "vLLM"],
    ["serve", "--profile", "vLLM", "--port", "0"],
])
def test_a_profile_in_the_wrong_case_gets_the_case_to_use(verb: list[str]) -> None:
    done = rushhour(*verb, timeout=60, script=True)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown profile 'vLLM'" in done.stderr and "names are case-sensitive: 'vllm'" in done.stderr
    assert "Traceback" not in done.stderr
