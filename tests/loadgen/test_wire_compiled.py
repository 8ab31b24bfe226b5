"""The wire client's compiled build (``loadgen/compiled.py``): the same records as the sources, said in run.json.

Two real ``rushhour run`` processes run the same seeded scenario against the testbed, one with the compiled wire
client (the default when a build matches) and one with ``RUSHHOUR_COMPILED=0``; their records are compared field by
field, times and ids left out. The build is made here if missing or stale (≈ 20 s; ``make test`` makes it first).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import rushhour

from rushhour.loadgen import compiled
from rushhour.records.record import read_shard, shard_paths

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                 reason="no C compiler: the wire client runs interpreted")]

REPO = Path(__file__).resolve().parents[2]

# Single-turn chats on an idle testbed: every request's content, answer and outcome follow from the seed alone
# (no prefix-cache sharing, no queueing), so two runs must agree on everything but times and random ids.
SCENARIO = """
name: wire-compiled
seed: 41
target:
  url: testbed
  profile: vllm
  model: testbed-model
  testbed: {preset: tiny, replicas: 2}
  metrics: null
tiers:
  - {name: interactive, priority: 10}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {process: poisson, rate: 6}
    turns: 1
    prompt_tokens: {dist: uniform, low: 20, high: 400}
    output_tokens: {dist: uniform, low: 2, high: 40}
phases:
  - {name: main, duration: 3s}
drain_s: 3
"""

# Times (ns from the anchor, the token clock, how the first read was timed and what it held), the server's own
# timing, and the ids drawn at random per attempt: everything else is a fact of the seeded request and its answer.
NOT_COMPARED = frozenset({
    "run_id", "request_id", "logical_id", "session_id", "parent_id", "sent_ns", "headers_ns", "first_token_ns",
    "last_token_ns", "done_ns", "itl_max_ns", "itl_mean_ns", "token_ns", "first_token_clock", "first_token_read_ns",
    "first_token_batch", "seq",
    "endpoint",  # each run's testbed listens on a port of its own
})
SERVER_TIMING = ("metrics_", "litellm_", "gateway_")  # the server's own clock, per answer (vLLM, LiteLLM, a gateway)


def _env(value: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != compiled.ENV}
    if value is not None:
        env[compiled.ENV] = value
    return env


def _run(tmp_path: Path, value: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / f"runs-{value}"
    done = rushhour("run", scenario, "--out", out, "--no-report", timeout=300, env={compiled.ENV: value})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run_dir = next(out.glob("*/run.json")).parent
    # the scenario's requests (the idle probes before the anchor are sent when the process is ready: not seeded)
    records = [r for path in shard_paths(run_dir) for r in read_shard(path).lines
               if r.get("kind") == "request" and r.get("persona") == "chat"]
    return json.loads((run_dir / "run.json").read_text()), records


def _by_schedule(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Records keyed by what the seed decides: persona, intended send time, attempt."""
    keyed = {(r["persona"], r["intended_ns"], r["attempt"]): r for r in records}
    assert len(keyed) == len(records), "two records with one schedule key"
    return keyed


def test_compiled_and_interpreted_runs_write_the_same_records(tmp_path: Path) -> None:
    compiled.WIRE.build(quiet=True)
    probe = "import rushhour.loadgen.engine.wire.stream as s; print(s.__file__)"
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, env=_env(None),
                            timeout=120)
    assert loaded.stdout.strip().endswith(".so"), loaded.stdout + loaded.stderr  # a load process's import rule
    fast_manifest, fast = _run(tmp_path, None)
    slow_manifest, slow = _run(tmp_path, "0")
    assert fast_manifest["code"] == "compiled (mypyc)"
    assert slow_manifest["code"] == "interpreted (RUSHHOUR_COMPILED=0)"
    a, b = _by_schedule(fast), _by_schedule(slow)
    assert set(a) == set(b) and len(a) >= 10
    served = 0
    for key in sorted(a):
        left = {k: v for k, v in a[key].items() if k not in NOT_COMPARED and not k.startswith(SERVER_TIMING)}
        right = {k: v for k, v in b[key].items() if k not in NOT_COMPARED and not k.startswith(SERVER_TIMING)}
        assert left == right, key
        served += bool(left["complete"] and left["tokens"] > 1)
    assert served >= 10  # streamed answers of several tokens: the hot path ran, not only the edges


def test_a_source_edit_makes_the_wire_build_stale(tmp_path: Path) -> None:
    # any byte of a compiled module's source changes the digest: the old build is not found, so not used
    wire = compiled.WIRE
    edited = tmp_path / "sse.py"
    edited.write_bytes(compiled.source("rushhour.loadgen.engine.wire.sse").read_bytes() + b"\n# edited\n")
    stale = compiled.CompiledSet(wire.what, wire.modules, wire.root, wire.command,
                                 source_of=lambda m: edited if m.endswith(".sse") else compiled.source(m))
    assert stale.digest() != wire.digest()
    assert stale.manifest() is None
    assert stale.status() == ("interpreted (RUSHHOUR_COMPILED=0)" if os.environ.get(compiled.ENV) == "0" else
                              "interpreted (no compiled build of these sources: "
                              "`python -m rushhour.loadgen.compiled build`)")
    assert not stale.install()
