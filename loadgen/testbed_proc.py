"""Start and stop the embedded testbed as a child process (config from the scenario, ledger in the run folder)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rushhour import stacks
from rushhour.scenarios.model import Route, Scenario, TestbedOptions

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
    "revocation",
    "revocation_timeout_s",
}
_ALIASES = {"queue_ttl_s": ("flow_control", "ttl_s")}


class TestbedError(RuntimeError):
    """The testbed did not start (bad config, crash, no health)."""

    __test__ = False


def testbed_config(scenario: Scenario, route: Route | None = None, with_faults: bool = True) -> dict[str, Any]:
    """The testbed YAML for a scenario (or for one of its fallback routes with ``url: testbed``).

    Preset, replicas, speed, models, tier objectives, faults, extras: from ``target.testbed`` for the
    primary, from the route's own ``testbed:`` options (defaults when absent) for a fallback route.
    """
    if route is None:
        tb = scenario.target.testbed
        profile = stacks.testbed_profile(scenario.target.profile)  # the testbed imitates stacks
        models = [scenario.target.model]
        models += [r.model for r in scenario.resilience.fallback if r.model and r.model not in models]
    else:
        tb = route.testbed or TestbedOptions()
        profile = stacks.testbed_profile(route.profile)
        models = [route.model or scenario.target.model]
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
    if tb.faults and with_faults:
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
    faults: list[dict[str, Any]] = field(default_factory=list)  # scheduled on the run's clock, not in the config
    speed: float = 1.0

    __test__ = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls, scenario: Scenario, run_dir: Path, timeout_s: float = 30.0, route: Route | None = None
    ) -> TestbedProcess:
        """Start the primary's testbed, or (``route``) a fallback route's own testbed on its own port.

        Files: ``testbed.yaml``, ``testbed-ledger.jsonl``, ``testbed.log`` for the primary;
        ``testbed-<route>.yaml``, ``testbed-ledger-<route>.jsonl``, ``testbed-<route>.log`` for a route.
        """
        suffix = "" if route is None else "-" + route_file_name(route.name)
        config_path = run_dir / f"testbed{suffix}.yaml"
        config_path.write_text(yaml.safe_dump(testbed_config(scenario, route, with_faults=False), sort_keys=False))
        options = scenario.target.testbed if route is None else (route.testbed or TestbedOptions())
        port_file = run_dir / f"testbed{suffix}.port"
        ledger = run_dir / f"testbed-ledger{suffix}.jsonl"
        log_path = run_dir / f"testbed{suffix}.log"
        cmd = [
            sys.executable,
            "-m",
            "rushhour.testbed",
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
                return cls(proc, port, ledger, config_path, log_path, list(options.faults), options.speed)
            time.sleep(0.05)
        stop_pid(proc)
        raise TestbedError(f"testbed not healthy after {timeout_s:.0f} s: {_tail(log_path)}")

    def stop(self, grace_s: float = 5.0) -> int | None:
        return stop_pid(self.proc, grace_s)

    def schedule_faults(self, anchor_mono_ns: int) -> list[dict[str, Any]]:
        """Schedule the scenario's faults so that ``at_s`` counts from the run's t = 0 (the anchor).

        The faults go through the testbed's ``POST /admin/faults`` (``at_s`` relative to the moment
        it arrives, in simulated seconds) shifted by the time left until the anchor. Returns each
        fault with its window in run seconds (``start_s``/``end_s``), for ``run.json``.
        """
        if not self.faults:
            return []
        lead_s = (anchor_mono_ns - time.monotonic_ns()) / 1e9
        shifted = [dict(f, at_s=float(f.get("at_s", 0.0)) + lead_s * self.speed) for f in self.faults]
        req = urllib.request.Request(
            f"{self.url}/admin/faults",
            data=json.dumps(shifted).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=5.0) as resp:
                listed = json.loads(resp.read())["faults"]
        except (OSError, ValueError, KeyError) as exc:
            raise TestbedError(f"scheduling faults on {self.url} failed: {exc}") from None
        out = []
        for item in listed[-len(shifted):]:
            end = item.get("end_ns")
            out.append({
                "kind": item.get("kind"),
                "name": item.get("name"),
                "start_s": round((int(item["start_ns"]) - anchor_mono_ns) / 1e9, 6),
                "end_s": None if end is None else round((int(end) - anchor_mono_ns) / 1e9, 6),
            })
        return out


def route_file_name(name: str) -> str:
    """A route name made safe for a file name (``testbed-ledger-<route>.jsonl``)."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name) or "route"


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
    """The folder holding the `rushhour` package (a checkout's root, or site-packages), for a child's PYTHONPATH."""
    # unresolved: this file is rushhour/loadgen/testbed_proc.py (in a checkout rushhour/loadgen links to loadgen/);
    # the installed package's own folder on the path would put its modules (rushhour/locust.py …) at top level
    return Path(__file__).absolute().parents[2]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for our child processes: this checkout importable, plus ``extra``."""
    env = dict(os.environ)
    root = str(repo_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env
