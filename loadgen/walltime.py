"""How long a run really takes, said before it starts: start-up, calibration, the load, the drain (pure).

A run is longer than its phases: the testbed starts, the idle probes go one after another, Locust's
processes start and the schedule begins a lead after them (``loadgen/ship.anchor_lead_s``), and the drain waits (up to
``drain_s``) for what is still in flight. The figures for start-up and a probe are what a 2-core
machine measured against the testbed (Dec 2026); a slow target's probes take longer, bounded by
their own deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass

from rushhour.loadgen.probes import probe_plan
from rushhour.loadgen.ship import anchor_lead_s
from rushhour.scenarios.model import Scenario

TESTBED_START_S = 1.0  # `python -m rushhour.testbed` until it answers
CALIBRATION_START_S = 1.5  # the probes' child process (gevent) until its first probe
PROBE_S = 0.5  # an idle probe of 2 output tokens on the testbed's L4 presets: 0.2 s at 256 prompt tokens, 0.9 s at 2048
LOCUST_START_S = 1.0  # Locust's processes until the master takes the anchor
REPORT_S = 2.0  # the audit and the reports after the load


@dataclass(frozen=True)
class WallTime:
    """The parts of a run's wall time, in seconds."""

    start_s: float
    calibration_s: float
    probes: int
    load_s: float
    drain_s: float

    @property
    def total_s(self) -> float:
        return self.start_s + self.calibration_s + self.load_s + self.drain_s + REPORT_S

    def line(self) -> str:
        """One line for the console, said before anything starts."""
        parts = [f"start-up ≈ {self.start_s:.0f} s"]
        if self.probes:
            parts.append(f"{self.probes} calibration probes ≈ {self.calibration_s:.0f} s")
        parts += [f"load {self.load_s:.0f} s", f"drain up to {self.drain_s:.0f} s", f"audit ≈ {REPORT_S:.0f} s"]
        return f"this run takes about {self.total_s:.0f} s: " + " + ".join(parts)


def wall_time(scenario: Scenario, processes: int = 1, remote_workers: bool = False) -> WallTime:
    """The expected wall time of ``rushhour run`` on ``scenario`` (with the drain at its longest)."""
    probes = len(probe_plan(scenario))
    testbeds = int(scenario.target.is_testbed) + sum(1 for r in scenario.resilience.fallback if r.url == "testbed")
    return WallTime(
        start_s=TESTBED_START_S * testbeds + LOCUST_START_S + anchor_lead_s(processes, remote_workers),
        calibration_s=(CALIBRATION_START_S + PROBE_S * probes) if probes else 0.0,
        probes=probes,
        load_s=scenario.duration_s,
        drain_s=scenario.drain_s,
    )
