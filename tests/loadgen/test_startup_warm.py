"""A load process builds its prompt base before the anchor: lazily, on the first arrival, it stalled the loop.

Seen before the fix: a health sample of 151 ms at t = 0.7 s of a 15 s sweep step (the 1 MiB base text is
~80–150 ms of Python, built by the first ``prompts.text`` call), which alone made the step invalid.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = """
name: warm
target: {url: "http://127.0.0.1:9", profile: vllm, metrics: null}
tiers: [{name: t}]
personas:
  - {kind: chat, name: c, tier: t, arrival: {process: constant, rate: 1}, turns: 1, system_prompt_tokens: 0,
     prompt_tokens: 4, output_tokens: 2}
phases: [{name: p, duration: 2s}]
"""

PROBE = """
import sys, types
from rushhour.loadgen import prompts
from rushhour.loadgen.engine import locustfile
assert prompts._base.cache_info().currsize == 0
opts = types.SimpleNamespace(rh_scenario=sys.argv[1], rh_scenario_json="", rh_run_dir=sys.argv[2], rh_run_id="r",
                             rh_mono_anchor_ns="0", rh_wall_anchor_ns="0", rh_anchor_host="", rh_route_urls="",
                             rh_target="")
ctx = locustfile._context(opts, 0, 1)
ctx.writer.close()
print(prompts._base.cache_info().currsize)
"""


def test_context_builds_the_prompt_base_before_the_schedule(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    done = subprocess.run([sys.executable, "-c", PROBE, str(scenario), str(tmp_path / "run")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "1"
