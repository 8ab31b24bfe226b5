"""Prometheus deltas from a real server and a rushhour run as a subprocess, for the ``real`` tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
Sample = tuple[str, dict[str, str], float]
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(url: str, headers: Mapping[str, str] | None = None, server: Any = None) -> list[Sample]:
    """Every sample of a Prometheus text page (redirects followed, as LiteLLM's /metrics → /metrics/).

    With ``server`` (an engines/serve.py Server), a refused scrape says whether the server died, how
    (a negative code is the signal that killed it) and what it logged last."""
    req = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read().decode()
    except OSError as exc:
        if server is not None and not server.alive():
            raise AssertionError(f"{server.name} (pid {server.proc.pid}) exited with code {server.proc.returncode} "
                                 f"before this scrape ({exc}); its log ends:\n{server.log_tail(60)}") from None
        raise
    out: list[Sample] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and not line.startswith("#"):
            out.append((match.group(1), dict(_LABEL.findall(match.group(2) or "")), float(match.group(3))))
    return out


def total(samples: list[Sample], name: str, **labels: str | tuple[str, ...]) -> float:
    """Sum of ``name`` over samples whose labels match (a tuple = any of these values)."""
    def ok(have: dict[str, str]) -> bool:
        for key, want in labels.items():
            values = want if isinstance(want, tuple) else (want,)
            if have.get(key) not in values:
                return False
        return True
    return sum(value for n, lab, value in samples if n == name and ok(lab))


def settle(read: Callable[[], list[Sample]], idle: Callable[[list[Sample]], bool], timeout_s: float = 90.0
           ) -> list[Sample]:
    """Scrape until the server is idle and two scrapes hold the same samples (its counters are written after
    the answer). The process's own runtime samples (``process_*``, ``python_*``: CPU seconds, memory, GC) are
    left out: they move while the server idles, and no test reads them."""
    end = time.monotonic() + timeout_s
    last = read()
    previous = last
    while time.monotonic() < end:
        time.sleep(1.0)
        now = read()
        # the same samples, in any order and however often each is listed
        if idle(now) and _served(now) == _served(last):
            return now
        previous, last = last, now
    changed = sorted({f"{name}{labels}" for name, labels, _ in _served(last) ^ _served(previous)})[:8]
    raise AssertionError(f"the server's counters did not settle within {timeout_s:.0f} s (idle: {idle(last)}; "
                         f"changing between the last two scrapes: {changed or 'nothing'})")


def _served(samples: list[Sample]) -> set[tuple[str, str, float]]:
    """The server's own samples of a scrape as a set (runtime ones left out; see ``settle``)."""
    return {_key(s) for s in samples if not s[0].startswith(("process_", "python_"))}


def _key(sample: Sample) -> tuple[str, str, float]:
    """A sample as a hashable triple (its labels sorted), to name what changed between two scrapes."""
    name, labels, value = sample
    return name, str(sorted(labels.items())), value


def run_rushhour(scenario: Path, target: str, out: Path, env: Mapping[str, str] | None = None,
                 timeout_s: float = 300.0) -> dict[str, object]:
    """``rushhour run`` as a user runs it; returns summary.json (any exit code: gates are not the point)."""
    cmd = [sys.executable, "-m", "rushhour.cli", "run", str(scenario), "--target", target, "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    runs = sorted(p for p in out.iterdir() if (p / "summary.json").exists()) if out.exists() else []
    assert runs, (f"rushhour run wrote no summary (exit {proc.returncode}):\n"
                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads((runs[-1] / "summary.json").read_text())
    summary["_run_dir"] = str(runs[-1])
    summary["_stdout"] = proc.stdout
    return dict(summary)


def tiers(summary: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """The summary's tiers by name."""
    return {str(t["name"]): t for t in summary["tiers"]}  # type: ignore[index, union-attr, attr-defined]


def attempts(summary: Mapping[str, object], tier: str, cls: str) -> int:
    return int(tiers(summary)[tier]["attempts_by_class"][cls])  # type: ignore[index]


NEVER_FOR_A_REJECTION = ("failed", "transport", "unclassified")


def idle_vllm(samples: list[Sample]) -> bool:
    """vLLM runs and queues nothing (its gauges), so its counters can be read as a before or an after."""
    return total(samples, "vllm:num_requests_running") + total(samples, "vllm:num_requests_waiting") == 0


def counted_run(server: Any, scenario: Path, out: Path) -> tuple[list[Sample], dict[str, object], list[Sample]]:
    """A ``rushhour run`` against a real vLLM between two settled scrapes of its counters: (before, summary, after)."""
    url = server.url + "/metrics"
    before = settle(lambda: scrape(url, server=server), idle_vllm)
    summary = run_rushhour(scenario, server.url, out)
    after = settle(lambda: scrape(url, server=server), idle_vllm)
    return before, summary, after
