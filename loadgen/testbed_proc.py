"""Start and stop the embedded testbed as a child process (config from the scenario, ledger in the run folder)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scenarios.model import Scenario

# scenario profile → testbed behaviour (the testbed imitates stacks; "testbed" means its default)
_TESTBED_PROFILE = {"testbed": "llm-d", "smg": "llm-d"}
# keys of the testbed's flow_control section that a scenario may write at the top level for short
_FLOW_KEYS = {
    "fairness",
    "ttl_s",
    "no_endpoint_ttl_s",
    "sweep_interval_s",
    "band_max_requests",
    "band_max_bytes",
    "max_requests",
    "max_bytes",
    "bands",
    "queue_depth_threshold",
    "kv_cache_util_threshold",
    "saturation_ceiling",
    "enable_eviction",
}
_ALIASES = {"queue_ttl_s": ("flow_control", "ttl_s")}


class TestbedError(RuntimeError):
    """The testbed did not start (bad config, crash, no health)."""

    __test__ = False


def testbed_config(scenario: Scenario) -> dict[str, Any]:
    """The testbed YAML for a scenario: preset, replicas, speed, models, tier objectives, faults, extras."""
    tb = scenario.target.testbed
    profile = _TESTBED_PROFILE.get(scenario.target.profile, scenario.target.profile)
    models = [scenario.target.model]
    models += [r.model for r in scenario.resilience.fallback if r.model and r.model not in models]
    objectives = {(t.objective or t.name): t.priority for t in scenario.tiers}
    ranked = sorted(objectives, key=lambda name: -objectives[name])
    ranks: dict[str, int] = {}
    for name in ranked:  # equal priorities share a headroom tier
        ranks[name] = len({objectives[n] for n in ranked if objectives[n] > objectives[name]})
    cfg: dict[str, Any] = {
        "profile": profile,
        "preset": tb.preset,
        "replicas": tb.replicas,
        "speed": tb.speed,
        "models": models,
        "seed": scenario.seed,
        "flow_control": {"objectives": objectives},
        "headroom": {"tiers": ranks},
    }
    extra: dict[str, Any] = {}
    for key, value in tb.config.items():
        if key in _ALIASES:
            section, name = _ALIASES[key]
            extra.setdefault(section, {})[name] = value
        elif key in _FLOW_KEYS:
            extra.setdefault("flow_control", {})[key] = value
        else:
            extra[key] = value
    _merge(cfg, extra)
    if tb.faults:
        cfg["faults"] = list(tb.faults)
    return cfg


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


@dataclass
class TestbedProcess:
    """A running testbed: its URL, port, ledger and PID."""

    proc: subprocess.Popen[bytes]
    port: int
    ledger: Path
    config_path: Path
    log_path: Path

    __test__ = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, scenario: Scenario, run_dir: Path, timeout_s: float = 30.0) -> TestbedProcess:
        config_path = run_dir / "testbed.yaml"
        config_path.write_text(yaml.safe_dump(testbed_config(scenario), sort_keys=False))
        port_file = run_dir / "testbed.port"
        ledger = run_dir / "testbed-ledger.jsonl"
        log_path = run_dir / "testbed.log"
        cmd = [
            sys.executable,
            "-m",
            "testbed",
            "--config",
            str(config_path),
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--ledger",
            str(ledger),
        ]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=child_env(),
            )
        deadline = time.monotonic() + timeout_s
        port = 0
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise TestbedError(f"testbed exited with {proc.returncode}: {_tail(log_path)}")
            if port == 0 and port_file.exists():
                text = port_file.read_text().strip()
                port = int(text) if text.isdigit() else 0
            if port and _healthy(port):
                port_file.unlink(missing_ok=True)
                return cls(proc, port, ledger, config_path, log_path)
            time.sleep(0.05)
        stop_pid(proc)
        raise TestbedError(f"testbed not healthy after {timeout_s:.0f} s: {_tail(log_path)}")

    def stop(self, grace_s: float = 5.0) -> int | None:
        return stop_pid(self.proc, grace_s)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def stop_pid(proc: subprocess.Popen[bytes], grace_s: float = 5.0, sig: int = signal.SIGTERM) -> int | None:
    """Stop a child we started: ``sig`` (SIGTERM), then SIGKILL after ``grace_s``; returns its exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    return proc.returncode


def _tail(path: Path, size: int = 1500) -> str:
    try:
        data = path.read_bytes()[-size:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()


def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for our child processes: this checkout importable, plus ``extra``."""
    env = dict(os.environ)
    root = str(repo_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env
