"""Simulator speed: simulated seconds per wall second, events/s and peak memory as replicas and users grow.

    .venv/bin/python benchmarks/sim.py                      # the growth table + the issue's target case
    .venv/bin/python benchmarks/sim.py --target-s 300       # the target case over 300 simulated seconds
    .venv/bin/python benchmarks/sim.py --only-target
    .venv/bin/python benchmarks/sim.py --realistic          # and the target's agents as people's agents
    .venv/bin/python benchmarks/sim.py --only-target --realistic --realistic-s 3600   # its whole hour
    .venv/bin/python benchmarks/sim.py --only-target --code compiled                  # only the compiled build

Each case runs ``rushhour simulate``'s engine (``sim.run.simulate_scenario``) in a fresh process, so peak
RSS (``getrusage``) is the case's own, on one core. The workload: an agent swarm with the scenario
defaults (12k-token shared context, 2k–10k per task, fan-out, heavy-tailed tool time, a deadline) plus
chat users, on H100-class replicas (``h100-llama8b``: 256 sequences, 430k KV tokens each) behind llm-d
flow control. Users grow with replicas (156 agents and 0.3 chat sessions/s per replica) so each case
is loaded alike. The issue's target: one simulated hour of 10,000 agents plus chat on 64 replicas in
at most 2 minutes on one core; the case runs ``--target-s`` simulated seconds (default 120) and the hour
is extrapolated linearly from it, which the output says. A short run is not the hour in small: its
first 30 s are the ramp (10,000 task contexts hashed at once) and nothing in it has lived long, so
memory that grows with the run's age is missed (a leak of ended attempts, fixed on 3 Dec 2026, grew
a measured hour to 6.1 GB where 120 s peaked at 0.9 GB). ``--realistic-s 3600`` measures the realistic
case's whole hour (≈ 2 min compiled, 2.5 min interpreted, since 6 Dec 2026); the storm's hour would take ≈ 17 min.

``--code both`` (the default for the target cases) runs each target case with the compiled build
(``sim/compiled.py``, made first if missing) and with the sources, alternating, and prints their ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rushhour.sim import compiled  # noqa: E402  (the repository's, run from anywhere)

GOAL_WALL_S = 120.0
HOUR_S = 3600.0

SCENARIO = """
name: sim-bench
seed: 7
target:
  url: testbed
  profile: llm-d
  testbed: {{preset: h100-llama8b, replicas: {replicas}}}
tiers:
  - {{name: interactive, priority: 100, slo: {{ttft_ms: {{p99: 2000}}}}}}
  - {{name: batch, priority: -1, slo: {{max_drop_rate: 0.2}}}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {{process: poisson, rate: {chat_rate}}}
    max_concurrent_sessions: 100000
  - kind: agent_swarm
    name: swarm
    tier: batch
    agents: {agents}
    ramp_s: 30{idle}
phases:
  - {{name: steady, duration: {duration}s}}
calibration: {{probes: 0}}
drain_s: 0
"""

CHILD = """
import json, sys
from pathlib import Path
from rushhour.scenarios import load_scenario
from rushhour.sim.run import SimOptions, simulate_scenario
sc = load_scenario(sys.argv[1])
print(json.dumps(simulate_scenario(sc, sys.argv[1], SimOptions(out_dir=Path(sys.argv[2]))).stats))
"""


# The second, realistic case: the same 10,000 agents as people's agents, each starting a task about every ten
# minutes (idle between tasks: exponential, mean 600 s), so the offered load is near what 64 replicas serve
# instead of a storm of immediate 429s from agents that fail and come back within seconds.
REALISTIC_IDLE = "\n    idle_between_tasks_s: {dist: exponential, mean: 600}"


def run_case(replicas: int, agents: int, chat_rate: float, duration_s: float, workdir: Path,
             idle: str = "", code: str = "interpreted") -> dict[str, Any]:
    """One case in a fresh process (compiled: with ``RUSHHOUR_COMPILED=1``, see sim/compiled.py); its stats."""
    path = workdir / f"r{replicas}-a{agents}-{duration_s:g}s{'-idle' if idle else ''}.yaml"
    path.write_text(SCENARIO.format(replicas=replicas, agents=agents, chat_rate=chat_rate, duration=duration_s,
                                    idle=idle))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", compiled.ENV: "1" if code == "compiled" else "0"}
    res = subprocess.run([sys.executable, "-c", CHILD, str(path), str(workdir / "runs")], capture_output=True,
                         text=True, cwd=ROOT, env=env, check=True)
    stats: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    if code == "compiled" and not stats["code"].startswith("compiled"):
        raise SystemExit(f"asked for the compiled build, ran {stats['code']}")
    return stats


def row(label: str, replicas: int, agents: int, chat: float, st: dict[str, Any]) -> str:
    code = st["code"].split(" ")[0]
    return (f"| {label} | {code} | {replicas} | {agents:,} | {chat:g} | {st['simulated_s']:g} | {st['wall_s']:.1f} | "
            f"{st['cpu_s']:.1f} | {st['speedup']:g}× | {st['events']:,} | {st['events_per_s']:,} | {st['steps']:,} | "
            f"{st['attempts']:,} | {st['max_rss_mb']:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--growth-s", type=float, default=60.0, help="simulated seconds per growth case")
    ap.add_argument("--replicas", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--target-s", type=float, default=120.0, help="simulated seconds of the target case")
    ap.add_argument("--only-target", action="store_true")
    ap.add_argument("--realistic", action="store_true",
                    help="also the target's agents as people's agents (a task about every ten minutes each)")
    ap.add_argument("--realistic-s", type=float, help="simulated seconds of the realistic case (default --target-s)")
    ap.add_argument("--keep", type=Path, help="keep the run folders here")
    ap.add_argument("--code", choices=["compiled", "interpreted", "both"],
                    help="the compiled build (made first if missing: `make compile`), the interpreted sources, or "
                         "both, each case twice, alternating (default: both for the target cases, compiled for growth)")
    args = ap.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="rushhour-sim-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.code != "interpreted":
        compiled.build(quiet=True)
    codes = ["interpreted", "compiled"] if args.code in (None, "both") else [args.code]
    print("| case | code | replicas | agents | chat/s | simulated s | wall s | CPU s | speed-up | events | events/s | "
          "engine steps | attempts | peak RSS MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    if not args.only_target:
        for r in args.replicas:
            agents, chat = 156 * r, round(0.3 * r, 1)
            st = run_case(r, agents, chat, args.growth_s, workdir, code=args.code or "compiled")
            print(row("growth", r, agents, chat, st), flush=True)
    cases: list[tuple[str, dict[str, Any]]] = []
    for code in codes:
        cases.append(("target", run_case(64, 10_000, 20.0, args.target_s, workdir, code=code)))
        print(row("target", 64, 10_000, 20.0, cases[-1][1]), flush=True)
    if args.realistic:
        for code in codes:
            cases.append(("realistic", run_case(64, 10_000, 20.0, args.realistic_s or args.target_s, workdir,
                                                REALISTIC_IDLE, code)))
            print(row("realistic", 64, 10_000, 20.0, cases[-1][1]), flush=True)
    print()
    for label, st in cases:
        hour = st["cpu_s"] * HOUR_S / st["simulated_s"]
        verdict = "meets" if hour <= GOAL_WALL_S else f"misses by {hour / GOAL_WALL_S:.2f}×"
        how = ("measured" if st["simulated_s"] >= HOUR_S else
               f"extrapolated from {st['simulated_s']:g} s, ramp included and memory growth unseen")
        print(f"one simulated hour of the {label} case, {st['code']}, ≈ {hour:,.0f} s of one core ({how}; speed-up "
              f"{HOUR_S / hour:.1f}× real time; peak {st['max_rss_mb']:,.0f} MB): {verdict} the goal of "
              f"{GOAL_WALL_S:.0f} s")
    for label in ("target", "realistic"):
        pair = {st["code"].split(" ")[0]: st["cpu_s"] for lab, st in cases if lab == label}
        if len(pair) == 2:
            print(f"{label}: compiled {pair['interpreted'] / pair['compiled']:.2f}× faster than interpreted, same run")


if __name__ == "__main__":
    main()
