"""Start a real vLLM or LiteLLM proxy on loopback, from the venvs engines/install.sh made, and stop it by PID.

Usable as a module (tests: ``start_vllm()``, ``start_litellm()``, ``Server.stop()``) and as a command:

    python engines/serve.py vllm --port 8000            # tiny Llama, priority scheduling, queue limits
    python engines/serve.py vllm --port 8001 --scheduling-policy fcfs   # the same, vLLM's default scheduling
    python engines/serve.py litellm --port 4000         # mock deployment, per-key tiers, Prometheus
    python engines/serve.py litellm --port 4000 --upstream http://127.0.0.1:8000   # gateway in front of vLLM
    python engines/serve.py vllm --release vllm-0.31.0  # another release listed in engines/releases.toml

Only the standard library: it runs under any python, the engines run in their own venvs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
MODEL_NAME = "tiny"


class EngineError(RuntimeError):
    """An engine is not installed or did not come up: the message is one line for the user."""


def _load_releases() -> ModuleType:
    # engines/ is a folder of scripts, not a package: releases.py is loaded by its path, under a name of its own
    name = "rushhour_engines_releases"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "releases.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
    return sys.modules[name]


releases = _load_releases()


def engines_home() -> Path:
    """Where the engine venvs and the tiny model live (``RUSHHOUR_ENGINES`` overrides)."""
    return Path(os.environ.get("RUSHHOUR_ENGINES") or Path.home() / ".cache" / "rushhour" / "engines")


def release(engine: str, name: str | None = None) -> Any:
    """The release of ``engine`` called ``name`` in engines/releases.toml, or its pinned one (one-line errors)."""
    try:
        found = releases.find(name or engine)
    except releases.ReleaseError as exc:
        raise EngineError(str(exc)) from None
    if found.engine != engine:
        raise EngineError(f"{found.name} is a {found.engine} release, not {engine}")
    return found


def pinned(name: str) -> tuple[str, str]:
    """(pip distribution, version) of an engine's pinned release (engines/releases.toml and its lock)."""
    found = release(name)
    return found.dist, found.version


def venv(name: str, release_name: str | None = None) -> Path:
    """The installed venv of an engine's release (its pinned one by default), or a one-line error on how to
    install it."""
    found = release(name, release_name)
    path = engines_home() / found.name
    if not (path / ".rushhour-installed").exists():
        raise EngineError(f"{found.name} is not installed in {path}: "
                          f"run `engines/install.sh {found.name}`")
    return path


def tiny_model_dir() -> Path:
    """The tiny random-weight Llama built by install.sh (engines/tiny_model.py)."""
    path = engines_home() / "tiny-llama"
    if not (path / "rushhour-tiny-model.json").exists():
        raise EngineError(f"no tiny model in {path}: run `engines/install.sh vllm`")
    return path


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_or_free(port: int | None) -> int:
    """``port`` if nothing listens there (else a one-line EngineError), or a free one.

    Readiness is polled on the port: another server already on it would answer, and the engine that
    then fails to bind would be reported ready.
    """
    if not port:
        return free_port()
    with socket.socket() as sock:
        # SO_REUSEADDR: a port left in TIME_WAIT by an earlier server is free; a listener still is not
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            raise EngineError(f"port {port} on {HOST} is already in use: pick another --port") from None
    return port


@dataclass
class Server:
    """A running engine: its process group, URL and log file."""

    name: str
    version: str
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    info: dict[str, object] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def pids(self) -> list[int]:
        """Every live process of the server's process group (vLLM's API server, engine core and worker)."""
        pgid = self.proc.pid  # started with start_new_session: the group id is the leader's pid
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    # /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses
                    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                    if int(fields[2]) == pgid and fields[0] != "Z":  # a zombie runs nothing
                        found.append(int(entry))
        return found

    def pin(self, cpu: int) -> None:
        """Keep every thread of every process of the server on one core from now on (threads it starts later
        inherit it); a no-op where the machine has no such core or no /proc."""
        if (os.cpu_count() or 1) <= cpu or not hasattr(os, "sched_setaffinity") or not Path("/proc").is_dir():
            return
        for pid in self.pids():
            with contextlib.suppress(OSError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(int(tid), {cpu})

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the whole process group (vLLM forks an engine core and workers), then SIGKILL."""
        pgid = self.proc.pid  # started with start_new_session: the group id is the leader's pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)  # stragglers of the group, even when the leader is gone
        self.proc.wait(timeout=grace_s)
        # a killed process dies when it next runs: on a busy machine the leader's children can outlive
        # killpg's return by a moment, and a stop that returns must mean the group is gone (its port, its core)
        end = time.monotonic() + grace_s
        while self.pids() and time.monotonic() < end:
            time.sleep(0.05)


def _wait_ready(server: Server, path: str, deadline_s: float, headers: dict[str, str] | None = None) -> None:
    """Poll ``path`` until it answers 200; a dead process or the deadline raise a one-line EngineError."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not server.alive():
            raise EngineError(f"{server.name} exited with code {server.proc.returncode} while starting; "
                              f"log: {server.log_path}")
        try:
            req = urllib.request.Request(server.url + path, headers=headers or {})
            with urllib.request.urlopen(req, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    server.stop()
    raise EngineError(f"{server.name} did not answer {path} within {deadline_s:.0f} s; log: {server.log_path}")


def _spawn(name: str, argv: list[str], env: dict[str, str], log_dir: Path | None, cwd: Path | None = None
           ) -> tuple[subprocess.Popen[bytes], Path]:
    log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"rushhour-{name}-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=str(cwd) if cwd else None, start_new_session=True)
    return proc, log_path


def _offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "DO_NOT_TRACK": "1", "VLLM_NO_USAGE_STATS": "1", "PYTHONUNBUFFERED": "1"})
    env.pop("PYTHONPATH", None)  # the engine venv must not import the project's packages
    return env


@dataclass(frozen=True)
class VllmLimits:
    """The admission knobs: small, so a short run on one core saturates them."""

    max_num_seqs: int = 4
    max_num_queued_reqs: int = 12
    max_num_queued_tokens: int = 3000
    max_model_len: int = 4096
    # The KV cache: 64k tokens of the tiny model (2 KiB a token), four times what max_num_seqs sequences of
    # max_model_len hold, so nothing is preempted for room. It is allocated and touched at every start, and
    # fresh memory costs 2.5-10 s a GiB to touch on this machine's VM: with 1 GiB, vLLM's KV set-up took up
    # to 8.7 s of a start, with 128 MiB 0.7-2.2 s (four starting at once).
    kv_cache_bytes: int = 128 * 2**20


def start_vllm(port: int | None = None, *, limits: VllmLimits | None = None, cpu: int | None = 1,
               log_dir: Path | None = None, ready_timeout_s: float = 240.0, scheduling: str = "priority",
               tool_call_parser: str | None = None, pin_when_ready: bool = False,
               release_name: str | None = None) -> Server:
    """vLLM's OpenAI server with the tiny model, priority scheduling and both admission limits, on loopback.

    ``scheduling="fcfs"`` starts it with vLLM's default first-come-first-served policy instead;
    ``tool_call_parser`` (e.g. ``hermes``) turns on tool calling (``--enable-auto-tool-choice``).
    ``cpu``: the core it serves on. ``pin_when_ready`` starts it on every core and pins it only once it
    answers, so that several servers starting at once share the machine (a start is ~40 s of one core:
    three processes importing torch in turn); the default pins it from the start. ``release_name``: a vLLM
    release listed in engines/releases.toml (``vllm-0.31.0``); the pinned one by default.
    """
    limits = limits or VllmLimits()
    env_dir = venv("vllm", release_name)
    model = tiny_model_dir()
    port = port_or_free(port)
    env = _offline_env()
    # One core, a small KV cache, no thread binding: the machine is shared with the load generator.
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it would override --kv-cache-memory-bytes (whole GiB only)
    env.update({"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "INFO"})
    argv = [str(env_dir / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model), "--served-model-name", MODEL_NAME, "--host", HOST, "--port", str(port),
            "--dtype", "float32", "--enforce-eager", "--max-model-len", str(limits.max_model_len),
            "--scheduling-policy", scheduling, "--max-num-seqs", str(limits.max_num_seqs),
            "--max-num-queued-reqs", str(limits.max_num_queued_reqs),
            "--max-num-queued-tokens", str(limits.max_num_queued_tokens),
            "--kv-cache-memory-bytes", str(limits.kv_cache_bytes), "--disable-uvicorn-access-log",
            # each answer's own timing (a ``metrics`` object: engine queue, prefill …), read into the records
            "--enable-per-request-metrics"]
    if tool_call_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", tool_call_parser]
    if cpu is not None and not pin_when_ready and shutil.which("taskset") and (os.cpu_count() or 1) > cpu:
        argv = ["taskset", "-c", str(cpu), *argv]
    proc, log_path = _spawn("vllm", argv, env, log_dir)
    found = release("vllm", release_name)
    server = Server("vllm", found.version, f"http://{HOST}:{port}", proc, log_path,
                    {"model": MODEL_NAME, "limits": limits.__dict__, "release": found.name, "lacks": found.lacks})
    _wait_ready(server, "/v1/models", ready_timeout_s)
    if cpu is not None and pin_when_ready:
        server.pin(cpu)
    return server


# Per-key tiers of the LiteLLM proxy: the custom-auth hook (engines/litellm/custom_auth.py) maps a key
# ``sk-tier-<tier>-<anything>`` to these limits; no database.
# interactive's 64 is headroom, never reached: on a loaded host the proxy holds requests longer (16 was hit)
LITELLM_TIERS: dict[str, dict[str, int | None]] = {
    "interactive": {"max_parallel_requests": 64, "rpm_limit": None},
    "batch": {"max_parallel_requests": 3, "rpm_limit": 120},
}
LITELLM_MASTER_KEY = "sk-rushhour-master-local"


@dataclass(frozen=True)
class LitellmDeployment:
    """The one model behind the proxy: a mock (fixed reply after a delay) or a real upstream (vLLM)."""

    max_parallel_requests: int = 6
    mock_delay_s: float = 0.4
    upstream: str | None = None  # base URL of an OpenAI-compatible server, e.g. the tiny vLLM


def litellm_config(deployment: LitellmDeployment) -> dict[str, object]:
    """The proxy's config.yaml (as a dict): one deployment named ``tiny``, custom auth, Prometheus on."""
    params: dict[str, object] = {"max_parallel_requests": deployment.max_parallel_requests}
    if deployment.upstream:
        params.update({"model": f"hosted_vllm/{MODEL_NAME}", "api_base": deployment.upstream.rstrip("/") + "/v1",
                       "api_key": "none"})
    else:
        params.update({"model": "openai/mock-tiny", "api_key": "none",
                       "mock_response": "This is a mock answer from the LiteLLM proxy deployment.",
                       "mock_delay": deployment.mock_delay_s})
    return {
        "model_list": [{"model_name": MODEL_NAME, "litellm_params": params}],
        "litellm_settings": {"callbacks": ["prometheus"], "num_retries": 0, "request_timeout": 120},
        "router_settings": {"num_retries": 0, "retry_after": 0},
        "general_settings": {"master_key": LITELLM_MASTER_KEY, "custom_auth": "custom_auth.user_api_key_auth",
                             "disable_spend_logs": True},
        # /metrics stays behind auth (LiteLLM's default): a scraper sends a tier key, as in production.
    }


def start_litellm(port: int | None = None, *, deployment: LitellmDeployment | None = None,
                  tiers: dict[str, dict[str, int | None]] | None = None, cpu: int | None = None,
                  log_dir: Path | None = None, ready_timeout_s: float = 180.0,
                  release_name: str | None = None) -> Server:
    """The LiteLLM proxy with per-key tiers through its custom-auth hook and the Prometheus callback.

    ``release_name``: a LiteLLM release listed in engines/releases.toml; the pinned one by default."""
    deployment = deployment or LitellmDeployment()
    env_dir = venv("litellm", release_name)
    port = port_or_free(port)
    work = Path(tempfile.mkdtemp(prefix="rushhour-litellm-cfg-"))
    shutil.copy(HERE / "litellm" / "custom_auth.py", work / "custom_auth.py")
    # JSON is valid YAML: no yaml dependency here.
    (work / "config.yaml").write_text(json.dumps(litellm_config(deployment), indent=2))
    env = _offline_env()
    env.update({"RUSHHOUR_LITELLM_TIERS": json.dumps(tiers or LITELLM_TIERS), "LITELLM_LOG": "INFO",
                "LITELLM_TELEMETRY": "False", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "DISABLE_SCHEMA_UPDATE": "True"})
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.pop("DATABASE_URL", None)
    argv = [str(env_dir / "bin" / "litellm"), "--config", str(work / "config.yaml"), "--host", HOST,
            "--port", str(port), "--num_workers", "1"]
    if cpu is not None and shutil.which("taskset") and (os.cpu_count() or 1) > cpu:
        argv = ["taskset", "-c", str(cpu), *argv]
    proc, log_path = _spawn("litellm", argv, env, log_dir or work, cwd=work)
    found = release("litellm", release_name)
    server = Server("litellm", found.version, f"http://{HOST}:{port}", proc, log_path,
                    {"model": MODEL_NAME, "deployment": deployment.__dict__, "tiers": tiers or LITELLM_TIERS,
                     "config_dir": str(work), "release": found.name, "lacks": found.lacks})
    _wait_ready(server, "/health/liveliness", ready_timeout_s)
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=["vllm", "litellm"])
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--upstream", default=None, help="litellm: route to this OpenAI-compatible URL, not a mock")
    parser.add_argument("--log-dir", type=Path, default=None)
    parser.add_argument("--scheduling-policy", choices=["priority", "fcfs"], default="priority",
                        help="vllm: priority (default here) or vLLM's own default, fcfs")
    parser.add_argument("--tool-call-parser", default=None, help="vllm: turn on tool calls with this parser (hermes)")
    parser.add_argument("--release", default=None,
                        help="a release listed in engines/releases.toml (vllm-0.31.0); the pinned one by default")
    args = parser.parse_args(argv)
    try:
        if args.engine == "vllm":
            server = start_vllm(args.port, log_dir=args.log_dir, scheduling=args.scheduling_policy,
                                tool_call_parser=args.tool_call_parser, release_name=args.release)
        else:
            server = start_litellm(args.port, deployment=LitellmDeployment(upstream=args.upstream),
                                   log_dir=args.log_dir, release_name=args.release)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{server.name} {server.version} ready at {server.url} (pid {server.proc.pid}, log {server.log_path})",
          flush=True)
    if server.name == "litellm":
        print("keys: " + ", ".join(f"sk-tier-{t}-local" for t in server.info["tiers"]), flush=True)  # type: ignore[attr-defined]

    def _stop(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        while server.alive():
            time.sleep(1)
        print(f"error: {server.name} exited with code {server.proc.returncode}; log: {server.log_path}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
