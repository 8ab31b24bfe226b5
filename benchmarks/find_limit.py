"""The limit in one run against the slow way: `run --find-limit` and `sweep --search` on the same testbed scenario.

    .venv/bin/python benchmarks/find_limit.py                  # real time: both on a tiny testbed replica
    .venv/bin/python benchmarks/find_limit.py --prior          # the one run started from a simulated first pass
    .venv/bin/python benchmarks/find_limit.py --simulate       # virtual time: both against the testbed's model

The scenario is the e2e tests' (tests/studies/test_find_limit_e2e.py): one tiny testbed replica, an
interactive tier (TTFT p90 ≤ 1 s, ≤ 5 % not served) and a batch tier (≤ 50 % not served). The reference is
the search a user sizing a stack for sustained load runs (1..8×, 8 probes at most, 10 % precision), each probe
measuring the steady state: a warm-up at the probe's load before its judged window and a cool-down after it
(the load kept on, unjudged, so the window's last requests wait behind others as under sustained load). Cold
probes from an empty queue that stop the load at once read this testbed as stronger than it is: measured in
docs/find-limit.md, and shown here with ``--cold``. The one run: steps of 4 s (a settling second before, a lag of
2 s after), two bisections, a hold of at most 8 s; with ``--prior``, a simulated find-limit run first (its
wall time counted) whose bracket the real run starts from (``--find-limit-from``). Both timed wall-clock, one
after the other, each as the CLI in a process (start-up, testbeds and audits included: what a user waits for);
the load average is printed because other work on the machine inflates both. The brackets are printed side by
side: the one run's should meet the search's.
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
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # the e2e test's scenario; tests/support beside it

from tests.studies.test_find_limit_e2e import (  # noqa: E402
    REAL_LIMIT,
    SEARCH_COOLDOWN,
    SEARCH_STEP,
    SEARCH_WARMUP,
    SIM_LIMIT,
    scenario,
)


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rushhour.cli", *args], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - t0


def meets(one: tuple[float, float], other: tuple[float, float]) -> bool:
    """Two brackets hold a common load: each one's pass under the other's fail, by more than the rounding of the
    levels (the search's 3.667× and the one run's 3.668× are one level: a pass at one and a fail at the other
    disagree)."""
    return one[0] < other[1] * (1 - 1e-3) and other[0] < one[1] * (1 - 1e-3)


def x(scale: float | None) -> str:
    return "-" if scale is None else f"{scale:.3g}×"


def only(folder: Path) -> Path:
    (run_dir,) = folder.iterdir()
    return run_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="both in virtual time")
    parser.add_argument("--prior", action="store_true", help="the one run from a simulated first pass's bracket")
    parser.add_argument("--cold", action="store_true", help="the search's probes cold: no warm-up, no cool-down")
    opts = parser.parse_args()
    print(f"load average before {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sim = ["--simulate"] if opts.simulate else []
        limit = SIM_LIMIT if opts.simulate else REAL_LIMIT
        prior_s = 0.0
        first: list[str] = []
        if opts.prior and not opts.simulate:
            prior_s = timed(["simulate", str(scenario(root, "300s", SIM_LIMIT)), "--find-limit", "--no-report",
                             "--out", str(root / "prior")])
            first = ["--find-limit-from", str(only(root / "prior"))]
            prior = json.loads((only(root / "prior") / "run.json").read_text())["find_limit"]
            print(f"prior      : [{x(prior['low_scale'])}, {x(prior['high_scale'])}] simulated in {prior_s:.1f} s")
        one = prior_s + timed(["simulate" if opts.simulate else "run",
                               str(scenario(root, "300s" if opts.simulate else "50s", limit)), "--find-limit", *first,
                               "--out", str(root / "one")])
        found = json.loads((only(root / "one") / "run.json").read_text())["find_limit"]
        warm, step, cool = SEARCH_WARMUP, SEARCH_STEP, SEARCH_COOLDOWN
        if opts.simulate:
            warm, step, cool = "5s", "20s", "3s"
        if opts.cold:
            warm, cool = "0", "0"
        search_s = timed(["sweep", str(scenario(root, "300s" if opts.simulate else "30s")), "--search", *sim,
                          "--scale", "1..8", "--step-duration", step, "--warmup", warm, "--cooldown", cool,
                          "--max-probes", "8", "--precision", "0.1", "--out", str(root / "search")])
        (sweep_dir,) = (root / "search").glob("sweep-*")
        search = json.loads((sweep_dir / "sweep.json").read_text())["search"]
    print(f"load average after {os.getloadavg()[0]:.1f}")
    print(f"find-limit : [{x(found['low_scale'])}, {x(found['high_scale'])}] in {one:.1f} s "
          f"({len(found['steps'])} steps, {found['status']})")
    print(f"search     : [{x(search['pass_scale'])}, {x(search['fail_scale'])}] in {search_s:.1f} s "
          f"({len(search['probes'])} probes of {warm} + {step} + {cool}, {search['status']})")
    for s in found["steps"]:
        how = "early" if s.get("early") else "ahead" if s.get("ahead") is not None else ""
        print(f"  {s['index']} {s['kind']:<6} {s['scale']:<8.4g} {s['window_s']} {s['outcome']:<5} "
              f"{how:<5} {s['reason'][:90]}")
    lo, hi, plo, phi = found["low_scale"], found["high_scale"], search["pass_scale"], search["fail_scale"]
    meet = None not in (lo, hi, plo, phi) and meets((lo, hi), (plo, phi))
    print(f"ratio      : {one / search_s:.2f} of the search's wall time; brackets meet: {meet}")


if __name__ == "__main__":
    main()
