"""The suite's scenario: one tier of single-turn chat against a tiny in-process testbed, a few knobs to turn."""

from __future__ import annotations

from pathlib import Path


def scenario(*, seconds: float = 12, rate: float = 4, ttft_p50_ms: float | None = 2000, drop: float | None = 0.5,
             abort: str = "", speed: float | None = None, seed: int = 7, judge: str = "point",
             name: str = "wf-test", profile: str = "llm-d", replicas: int = 1) -> str:
    """The scenario's YAML text (pure): SLOs, the testbed's speed and replicas and an ``abort:`` block to taste.

    No calibration probes and no metrics scrape (nothing to wait for), a 3-s drain. Tests edit the text with
    str.replace, so its layout is part of the contract: change it only with them."""
    slo = []
    if ttft_p50_ms is not None:
        slo.append(f"ttft_ms: {{p50: {ttft_p50_ms}}}")
    if drop is not None:
        slo.append(f"max_drop_rate: {drop}")
    slo.append(f"judge: {judge}")
    testbed = f"{{preset: tiny, replicas: {replicas}" + (f", speed: {speed}" if speed is not None else "") + "}"
    return f"""
name: {name}
seed: {seed}
target: {{url: testbed, profile: {profile}, model: testbed-model, testbed: {testbed}, metrics: null}}
tiers:
  - name: interactive
    priority: 100
    slo: {{{", ".join(slo)}}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {{process: poisson, rate: {rate}}}
    turns: 1
    prompt_tokens: {{dist: uniform, low: 20, high: 200}}
    output_tokens: {{dist: uniform, low: 4, high: 16}}
phases:
  - {{name: steady, duration: {seconds}s}}
calibration: {{probes: 0}}
drain_s: 3
{abort}
"""


def write_scenario(folder: Path, text: str | None = None, *, file: str = "s.yaml", **knobs: object) -> Path:
    """``text`` (else ``scenario(**knobs)``) written to ``folder/file``; its path."""
    assert text is None or not knobs, "a scenario's text or its knobs, not both"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    path.write_text(scenario(**knobs) if text is None else text)  # type: ignore[arg-type]
    return path
