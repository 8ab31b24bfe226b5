"""Shared bits of the simulator's tests: the CLI at their width, small scenarios."""

from __future__ import annotations

import functools
from pathlib import Path

from support import rushhour

# the simulator's tests read its tables at 120 columns
cli = functools.partial(rushhour, columns=120)


def only_run(out: Path) -> Path:
    """The one run folder under ``out``."""
    runs = [p for p in out.iterdir() if (p / "run.json").exists()]
    assert len(runs) == 1, runs
    return runs[0]


# An llm-d stack with tiny bands: interactive is served, batch overflows its band (429 rejected-saturated)
# and waits past a short TTL (429 rejected-ttl-expired): every class the flow control has.
SATURATED = """
name: sim-saturated
seed: 5
target:
  url: testbed
  profile: llm-d
  testbed:
    preset: tiny
    replicas: 1
    speed: 0.1  # 20-ms steps
    config:
      ttl_s: 0.3  # simulated seconds: 3 s at speed 0.1
      bands: [{priority: -1, max_requests: 6}]
tiers:
  - {name: interactive, priority: 100, slo: {ttft_ms: {p90: 3000}}}
  - {name: batch, priority: -1, slo: {max_drop_rate: 0.2}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {process: poisson, rate: 1.5}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: lognormal, median: 300, sigma: 0.5, max: 1500}
    output_tokens: {dist: lognormal, median: 40, sigma: 0.4, max: 120}
  - kind: chat
    name: bulk
    tier: batch
    arrival: {process: poisson, rate: 6}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {dist: lognormal, median: 600, sigma: 0.5, max: 2000}
    output_tokens: {dist: lognormal, median: 80, sigma: 0.4, max: 200}
phases:
  - {name: steady, duration: 20s}
calibration: {probes: 0}
drain_s: 3
"""
