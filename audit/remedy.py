"""Who lagged, on what host, and what to change: the cause and remedy an INVALID run or a WARNING names."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rushhour.audit import text

LAG_MS = 50.0  # a health second lagging more than this counts against its process (audit.validity.LOOP_LAG_MS)
BUSY_CPU_PERCENT = 70.0  # a process above this share of a core has little headroom left for its loop


@dataclass
class Diagnosis:
    """The generator's trouble, attributed: the worst process, the host's load, the generator's CPU share."""

    process: str = ""  # "worker 2 (pid 4242)", "the Locust process (pid 4242)"
    pid: int | None = None
    lag_max_ms: float | None = None
    lagging_seconds: int = 0
    load_avg_max: float | None = None
    cores: int | None = None
    cpu_mean_percent: float | None = None
    cpu_max_percent: float | None = None
    processes: int = 1
    embedded_testbed: bool = False
    remedies: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        """One line: cause, then remedy."""
        parts = []
        if self.process:
            lag = f"loop lag up to {text.ms(self.lag_max_ms)}" if self.lag_max_ms is not None else "no lag sample"
            if self.lagging_seconds:
                parts.append(f"{self.process} lagged most ({lag}, {self.lagging_seconds} second(s) over "
                             f"{text.ms(LAG_MS)})")
            else:
                parts.append(f"{self.process}: {lag}")
        if self.load_avg_max is not None:
            cores = f" on {self.cores} core(s)" if self.cores else ""
            parts.append(f"host load average up to {self.load_avg_max:.1f}{cores}")
        if self.cpu_mean_percent is not None:
            peak = f", max {self.cpu_max_percent:.0f} %" if self.cpu_max_percent is not None else ""
            parts.append(f"its CPU {self.cpu_mean_percent:.0f} % of a core on average{peak}")
        if self.embedded_testbed:
            parts.append("the embedded testbed runs on the same cores as the generator")
        cause = "; ".join(parts) or "no health samples to attribute it"
        return f"cause: {cause}. Remedy: {'; '.join(self.remedies)}."


def _name(pid: int | None, index: int, workers: int) -> str:
    who = "the Locust process" if workers <= 1 else f"worker {index}"
    return f"{who} (pid {pid})" if pid else who


def _column(health: pd.DataFrame, name: str) -> np.ndarray:
    if name not in health.columns:
        return np.full(len(health), np.nan)
    return health[name].to_numpy(dtype=np.float64)


def diagnose(health: pd.DataFrame, *, embedded_testbed: bool = False) -> Diagnosis:
    """Attribute the generator's trouble from its health samples (after the anchor). Pure."""
    out = Diagnosis(embedded_testbed=embedded_testbed)
    if not len(health):
        out.remedies = _remedies(out)
        return out
    lag = _column(health, "loop_lag_ns") / 1e6
    cpu = _column(health, "cpu_percent")
    pid = _column(health, "pid")
    index = np.nan_to_num(_column(health, "worker_index"), nan=0.0)
    workers = np.nan_to_num(_column(health, "workers"), nan=1.0)
    load = _column(health, "load1")
    cpus = _column(health, "cpus")
    out.processes = int(max(1.0, float(workers.max()) if len(workers) else 1.0))
    if np.isfinite(load).any():
        out.load_avg_max = float(np.nanmax(load))
    if np.isfinite(cpus).any() and np.nanmax(cpus) > 0:
        out.cores = int(np.nanmax(cpus))
    # the process with the most lagging seconds (ties: the worst lag); without pids, the index alone
    key = np.where(np.isfinite(pid), pid, -1.0 - index)
    best: tuple[int, float, float] | None = None
    for k in np.unique(key):
        mine = key == k
        bad = int((np.nan_to_num(lag[mine]) > LAG_MS).sum())
        worst = float(np.nanmax(lag[mine])) if np.isfinite(lag[mine]).any() else 0.0
        if best is None or (bad, worst) > (best[0], best[1]):
            best = (bad, worst, float(k))
    assert best is not None
    mine = key == best[2]
    out.lagging_seconds, out.lag_max_ms = best[0], best[1]
    out.pid = int(best[2]) if best[2] > 0 else None
    out.process = _name(out.pid, int(index[mine][0]), out.processes)
    own_cpu = cpu[mine]
    if np.isfinite(own_cpu).any():
        out.cpu_mean_percent = float(np.nanmean(own_cpu))
        out.cpu_max_percent = float(np.nanmax(own_cpu))
    out.remedies = _remedies(out)
    return out


def _remedies(d: Diagnosis) -> list[str]:
    """What to change, most likely first. Pure."""
    out: list[str] = []
    busy_self = d.cpu_max_percent is not None and d.cpu_max_percent >= BUSY_CPU_PERCENT
    crowded = d.load_avg_max is not None and d.cores is not None and d.load_avg_max > d.cores
    if busy_self:
        if d.cores and d.processes < d.cores:
            out.append(f"fewer users per process: `--processes {min(d.cores, d.processes + 1)}` "
                       f"({d.cores} core(s) here)")
        else:
            out.append("more load processes than this host's cores allow: add a host (`rushhour worker`, "
                       "docs/distributed.md)")
    if crowded or not busy_self:
        load = f" (load average {d.load_avg_max:.1f} on {d.cores} core(s))" if crowded else ""
        out.append(f"a quieter host{load}: other work held the generator's core")
    if d.embedded_testbed:
        out.append("the testbed on another host (`rushhour serve` there, then `--target URL`)")
    return out
