"""The simulator's records, byte for byte, for a fixed seed: a speed change must not move a single byte.

The digests were taken at d76d445 (before the per-attempt fast paths). Only the random ids differ from
run to run (the run id, uuid4 request and logical ids, the process id and host name): the ids are
replaced by their order of first appearance, the process by pid 0 on host "h"; everything else (field
order, number formats, every time, size and outcome) is pinned. A deliberate
change of what the simulator models (or of the personas' random streams) changes these digests: say
so in the commit and take the new ones from ``python tests/sim/test_pinned.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from sim.run import SimOptions, simulate

# 400 agents against a batch band of 40 (a flood of immediate 429s, as in the speed benchmark), chat users
# with patience (abandons), a 20-s client deadline (timeouts) and the hard stop (cancels)
SCENARIO = """
name: sim-pin
seed: 11
target:
  url: testbed
  profile: {profile}
  testbed:
    preset: h100-llama8b
    replicas: 2
{config}
tiers:
  - {{name: interactive, priority: 100, slo: {{ttft_ms: {{p99: 2000}}}}}}
  - {{name: batch, priority: -1, slo: {{max_drop_rate: 0.2}}}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {{process: poisson, rate: 4}}
    max_concurrent_sessions: 1000
    patience_s: {{dist: lognormal, median: 4, sigma: 0.8}}
  - kind: agent_swarm
    name: swarm
    tier: batch
    agents: 400
    ramp_s: 5
    shared_context_tokens: 2000
    task_context_tokens: {{dist: uniform, low: 500, high: 3000}}
resilience: {{timeouts: {{total_s: 20}}}}
phases:
  - {{name: steady, duration: 20s}}
calibration: {{probes: 0}}
drain_s: 2
"""
LLMD_CONFIG = """    config:
      ttl_s: 4
      bands: [{priority: -1, max_requests: 40}]"""
CASES = {
    # (lines, sha256 of the normalised lines)
    "llm-d": (4798, "d117c1b476a463d130090cde0fdcdceb21ebfeeec6dc7f0dada60d6511eb1ca4"),
    "vllm": (1135, "b8994372ca2532955ba283b0da2daa20a00b6c2514e9316866926e2b1182da42"),
}
_ID = re.compile(r"\b[0-9a-f]{32}\b")
_PROCESS = re.compile(r'"pid":\d+,"host":"[^"]*"')


def normalised(run_dir: Path) -> list[str]:
    """The shard's record lines, ids replaced by their order of appearance, the process by pid 0 on host h."""
    text = next((run_dir / "records").glob("*.jsonl")).read_text()
    header, _, body = text.partition("\n")
    run_id = json.loads(header)["run_id"]
    ids: dict[str, int] = {}

    def ordinal(m: re.Match[str]) -> str:
        return f"id{ids.setdefault(m.group(0), len(ids)):06d}"

    lines = (_ID.sub(ordinal, line.replace(run_id, "RUN")) for line in body.splitlines())
    return [_PROCESS.sub('"pid":0,"host":"h"', line) for line in lines]


def digest(profile: str, out: Path) -> tuple[int, str]:
    path = out / f"{profile}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCENARIO.format(profile=profile, config=LLMD_CONFIG if profile == "llm-d" else ""))
    lines = normalised(simulate(str(path), SimOptions(out_dir=out / profile)).run_dir)
    return len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest()


@pytest.mark.parametrize("profile", sorted(CASES))
def test_records_are_pinned(tmp_path: Path, profile: str) -> None:
    assert digest(profile, tmp_path) == CASES[profile]


if __name__ == "__main__":  # print the digests of this code (to pin a deliberate change)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for name in sorted(CASES):
            print(name, digest(name, Path(d)), file=sys.stdout)
