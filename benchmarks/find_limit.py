"""The limit in one run against the slow way: `run --find-limit` and `sweep --search` on the same testbed scenario.

    .venv/bin/python benchmarks/find_limit.py                  # real time: both on a tiny testbed replica
    .venv/bin/python benchmarks/find_limit.py --simulate       # virtual time: both against the testbed's model

The scenario is the e2e tests' (tests/studies/test_find_limit_e2e.py): one tiny testbed replica, an
interactive tier (TTFT p90 ≤ 1 s, ≤ 5 % not served) and a batch tier (≤ 50 % not served). The search runs as its
own e2e test asks (1..8×, probes of 6 s, no warm-up, 8 probes at most, 10 % precision); the one run with steps of
4 s (a settling second before, a lag second after), two bisections and a hold of at most 8 s. Both are timed
wall-clock, in the same sitting, one after the other, each as the CLI in a process (start-up, testbeds and audits
included: what a user waits for); the load average is printed because other work on the machine inflates both.
The brackets are printed side by side: the one run's should meet the search's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.studies.test_find_limit_e2e import REAL_LIMIT, SIM_LIMIT, scenario  # noqa: E402


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rushhour.cli", *args], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="both in virtual time")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sim = ["--simulate"] if opts.simulate else []
        limit = SIM_LIMIT if opts.simulate else REAL_LIMIT
        one = timed(["simulate" if opts.simulate else "run", str(scenario(root, "300s" if opts.simulate else "50s",
                                                                          limit)),
                     "--find-limit", "--out", str(root / "one")])
        (run_dir,) = (root / "one").iterdir()
        found = json.loads((run_dir / "run.json").read_text())["find_limit"]
        search_s = timed(["sweep", str(scenario(root, "300s" if opts.simulate else "30s")), "--search", *sim,
                          "--scale", "1..8", "--step-duration", "20s" if opts.simulate else "6s", "--warmup",
                          "5s" if opts.simulate else "0", "--max-probes", "8", "--precision", "0.1",
                          "--out", str(root / "search")])
        (sweep_dir,) = (root / "search").glob("sweep-*")
        search = json.loads((sweep_dir / "sweep.json").read_text())["search"]
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"find-limit : [{found['low_scale']:.3g}×, {found['high_scale']:.3g}×] in {one:.1f} s "
          f"({len(found['steps'])} steps, {found['status']})")
    print(f"search     : [{search['pass_scale']:.3g}×, {search['fail_scale']:.3g}×] in {search_s:.1f} s "
          f"({len(search['probes'])} probes, {search['status']})")
    for step in found["steps"]:
        how = "early" if step.get("early") else "ahead" if step.get("ahead") is not None else ""
        print(f"  {step['index']} {step['kind']:<6} {step['scale']:<8.4g} {step['window_s']} {step['outcome']:<5} "
              f"{how:<5} {step['reason'][:90]}")
    meet = found["low_scale"] < search["fail_scale"] and search["pass_scale"] < found["high_scale"]
    print(f"ratio      : {one / search_s:.2f} of the search's wall time; brackets meet: {meet}")


if __name__ == "__main__":
    main()
