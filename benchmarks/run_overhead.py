"""Where the wall time of one short ``rushhour run`` goes: stage by stage, and each process's import time.

Runs ``rushhour run SCENARIO --duration 2s --no-report`` as a real subprocess (as a test or a CI gate does), stamps
every line it prints on this process's monotonic clock (the same clock as the run's anchor on Linux), and splits
the wall time at those lines and at the files the run leaves (anchor.json, run.json). Then it times a bare import
of each process's entry module. Nothing is timed inside rushhour: re-run it before and after a change, under the
same load (the load averages are printed with the figures).

    .venv/bin/python benchmarks/run_overhead.py [--runs 3] [--scenario ci-smoke] [--duration 2s] [--peer DIR] [--report]

``--report``: the run audits and renders its reports too (as most tests and CI gates do); the last stage is then
the audit, the reports and the exit.

``--peer DIR``: a checkout of another version (e.g. ``git archive BASE | tar -x -C DIR``), run in turn with this
tree in the same sitting (each with its own folder first on PYTHONPATH), so the busy machine weighs on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

from rushhour.loadgen.ship import ANCHOR_LEAD_S

# each process a run starts, by the module it starts from (the Locust child is `python -m locust -f locustfile.py`)
ENTRY_MODULES = {
    "CLI (rushhour.cli)": "rushhour.cli",
    "CLI + the audit it uses during the load": "rushhour.cli, rushhour.audit.early",
    "testbed (its cli and server)": "rushhour.testbed.cli, rushhour.testbed.server, aiohttp.web",
    "calibration child": "rushhour.loadgen.engine.calibrate",
    "Locust child (locust + locustfile)": "locust, rushhour.loadgen.engine.locustfile",
}
STAGES = ("CLI start-up and prepare", "testbed start-up", "calibration (child + probes)",
          "Locust start-up (to its anchor)", "anchor lead (idle by design)", "load + drain",
          "end of load to the last line", "exit (or audit + reports + exit)")


HERE = Path(__file__).resolve().parents[1]  # this tree


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that makes a fresh interpreter (and the children it starts) import ``tree``'s rushhour."""
    return {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "200"}


def stamped_run(cmd: list[str], tree: Path) -> tuple[float, list[tuple[float, str]]]:
    """Run ``cmd``; (wall seconds, [(seconds since start, line)]) on this process's monotonic clock."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            cwd=tree, env=tree_env(tree))
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip()))
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"the run exited {proc.returncode}: " + " | ".join(text for _, text in lines[-3:]))
    return time.monotonic() - t0, lines


def at(lines: list[tuple[float, str]], start: str) -> float:
    """When the first line starting with ``start`` was printed."""
    return next(t for t, text in lines if text.startswith(start))


def stages(wall: float, t0_mono: float, lines: list[tuple[float, str]], run_dir: Path) -> dict[str, float]:
    """The wall time split at the run's own lines and files (seconds)."""
    taken = json.loads((run_dir / "anchor.json").read_text())
    anchor = taken["mono_anchor_ns"] / 1e9 - t0_mono
    # the file holds t = 0 and, since Dec 2026, the lead it was taken with (a single local process takes it once
    # its context is built); an older tree's file has no lead: its anchor came ANCHOR_LEAD_S after the test start
    test_start = anchor - taken.get("lead_ns", ANCHOR_LEAD_S * 1e9) / 1e9
    marks = [0.0, at(lines, "starting the testbed"), at(lines, "calibration: "),
             [t for t, text in lines if text.startswith("calibration: ")][-1], test_start, anchor]
    manifest = json.loads((run_dir / "run.json").read_text())
    end = anchor + float(manifest["duration_s"]) + float(manifest["drain_s"])
    last = at(lines, "run folder:")
    load_end = min(end, last)
    marks += [load_end, last, wall]
    return {name: round(b - a, 2) for name, (a, b) in zip(STAGES, pairwise(marks), strict=True)}


def import_seconds(modules: str, tree: Path, repeat: int = 3) -> float:
    """Median wall time of a fresh interpreter importing ``modules`` (start-up included)."""
    times = []
    for _ in range(repeat):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", f"import {modules}"], check=True, cwd=tree, env=tree_env(tree))
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def median_of(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} [{min(values):5.2f}, {max(values):5.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scenario", default="ci-smoke")
    parser.add_argument("--duration", default="2s")
    parser.add_argument("--peer", type=Path, help="another checkout, measured in turn with this one")
    parser.add_argument("--report", action="store_true", help="audit and render the reports too")
    args = parser.parse_args()
    trees = {"this": HERE} | ({"peer": args.peer.resolve()} if args.peer else {})
    print(f"load averages before: {os.getloadavg()}")
    rows: dict[str, dict[str, list[float]]] = {label: {name: [] for name in (*STAGES, "total")} for label in trees}
    with tempfile.TemporaryDirectory() as out:
        for i in range(args.runs):
            for label, tree in (trees.items() if i % 2 == 0 else reversed(trees.items())):
                where = Path(out) / f"{label}-{i}"
                cmd = [sys.executable, "-m", "rushhour.cli", "run", args.scenario, "--duration", args.duration,
                       "--report" if args.report else "--no-report", "--out", str(where)]
                t0_mono = time.monotonic()
                wall, lines = stamped_run(cmd, tree)
                (run_dir,) = where.iterdir()
                for name, value in stages(wall, t0_mono, lines, run_dir).items():
                    rows[label][name].append(value)
                rows[label]["total"].append(round(wall, 2))
    flag = "--report" if args.report else "--no-report"
    print(f"`rushhour run {args.scenario} --duration {args.duration} {flag}`, {args.runs} run(s) each, seconds, "
          "median [min, max]:")
    print(f"  {'stage':<40} " + "  ".join(f"{label + ' ' + str(tree):<24}" for label, tree in trees.items()))
    for name in (*STAGES, "total"):
        print(f"  {name:<40} " + "  ".join(f"{median_of(rows[label][name]):<24}" for label in trees))
    print("bare imports of each process's entry, a fresh interpreter each (median of 3), seconds:")
    for name, modules in ENTRY_MODULES.items():
        print(f"  {name:<40} " + "  ".join(f"{import_seconds(modules, tree):6.2f}{'':<18}" for tree in trees.values()))
    print(f"load averages after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
