"""The simulator's records, byte for byte, for a fixed seed: a speed change must not move a single byte.

The digests were taken at d76d445 (before the per-attempt fast paths) and taken again when agents stopped
starting new steps once the load phases ended (17 and 9 lines fewer: the swarm's steps in the drain).
Only the random ids differ from run to run (the run id, uuid4 request and logical ids, the process id
and host name): the ids are replaced by their order of first appearance, the process by pid 0 on host
"h"; everything else (field order, number formats, every time, size and outcome) is pinned. A deliberate
change of what the simulator models (or of the personas' random streams) changes these digests: say
so in the commit and take the new ones from ``python tests/sim/test_pinned.py``. The vLLM case's were taken again
when the prefix cache began evicting a prompt's tail first, as vLLM frees blocks (1126 lines then 1132), and
for both cases when the record gained 13 optional fields (how a first token was timed; the servers' own timing),
which a simulated attempt writes as null: every other key and value of every line unchanged (checked line by line);
and again when the simulated servers began to report their own timing as the testbed does (testbed/timing.py: 428
and 175 lines now carry it): with those fields set back to null, both cases' bytes give the earlier digests.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from rushhour.sim.run import SimOptions, simulate

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
    "llm-d": (4781, "b37592dc6390bce141321289d9898064ee67126264ec92e1fee1bf7601a1d2d4"),
    "vllm": (1132, "ddfb78da053c7c94aa9a12721989ec51692de66501868d29827890b49914515b"),
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


def test_no_task_step_and_no_turn_starts_after_the_load(tmp_path: Path) -> None:
    """In the drain, requests in flight may finish, but nothing new is sent: a step started there is cut at the
    hard stop and counted as not served (before, 17 swarm steps of this scenario were sent in its 2 s drain)."""
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(profile="llm-d", config=LLMD_CONFIG))
    run_dir = simulate(str(path), SimOptions(out_dir=tmp_path / "out")).run_dir
    lines = [json.loads(line) for line in next((run_dir / "records").glob("*.jsonl")).read_text().splitlines()[1:]]
    first = [r for r in lines if r.get("kind") == "request" and int(r.get("attempt") or 1) == 1]
    end_ns = 20 * 1_000_000_000  # the one phase's end
    assert any(r["persona"] == "swarm" and r["step"] > 1 for r in first)  # tasks do take several steps
    assert [r for r in first if r["intended_ns"] >= end_ns] == []
    tasks = [r for r in lines if r.get("kind") == "task" and r.get("persona") == "swarm"]
    assert any(t["outcome"] == "cancelled" for t in tasks)  # the tasks the run's end stopped, not failed


if __name__ == "__main__":  # print the digests of this code (to pin a deliberate change)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for name in sorted(CASES):
            print(name, digest(name, Path(d)), file=sys.stdout)
