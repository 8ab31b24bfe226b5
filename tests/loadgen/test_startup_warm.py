"""A load process builds its prompt base before the anchor: lazily, on the first arrival, it stalled the loop.

Seen before the fix: a health sample of 151 ms at t = 0.7 s of a 15 s sweep step (the 1 MiB base text is
~80–150 ms of Python, built by the first ``prompts.text`` call), which alone made the step invalid.
"""

from __future__ import annotations

import json
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


ALONE = """
import json, sys, time, types
from pathlib import Path
from rushhour.loadgen import prompts
from rushhour.loadgen.engine import locustfile
opts = types.SimpleNamespace(rh_scenario=sys.argv[1], rh_scenario_json="", rh_run_dir=sys.argv[2], rh_run_id="r",
                             rh_mono_anchor_ns="0", rh_wall_anchor_ns="0", rh_anchor_host="", rh_route_urls="",
                             rh_target="", rh_anchor_at_start=sys.argv[3])
before = time.monotonic_ns()
ctx = locustfile._context(opts, 0, 1)
ctx.writer.close()
file = Path(sys.argv[2]) / "anchor.json"
taken = json.loads(file.read_text()) if file.exists() else None
print(json.dumps({"before": before, "built": prompts._base.cache_info().currsize, "ctx": ctx.anchor.mono_ns,
                  "file": taken}))
"""


def _alone(tmp_path: Path, at_start: str) -> dict[str, object]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    (tmp_path / "run").mkdir()
    done = subprocess.run([sys.executable, "-c", ALONE, str(scenario), str(tmp_path / "run"), at_start], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_runs_only_process_takes_the_anchor_once_its_context_is_built(tmp_path: Path) -> None:
    from rushhour.loadgen.ship import LOCAL_ANCHOR_LEAD_S

    got = _alone(tmp_path, "1")
    taken = got["file"]
    assert isinstance(taken, dict) and got["built"] == 1
    assert taken["lead_ns"] == int(LOCAL_ANCHOR_LEAD_S * 1e9)
    assert got["ctx"] == taken["mono_anchor_ns"]  # the shard's anchor is the one the runner reads
    # taken after the context's build began (the prompt base, the tokenizer, the routes), not at Locust's test start
    assert taken["mono_anchor_ns"] - taken["lead_ns"] >= got["before"]  # type: ignore[operator]


def test_without_the_runners_request_the_process_writes_no_anchor(tmp_path: Path) -> None:
    assert _alone(tmp_path, "0")["file"] is None
