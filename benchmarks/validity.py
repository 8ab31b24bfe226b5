"""Validity against ground truth: does the harm rule void exactly the runs whose timings were really wrong?

    .venv/bin/python benchmarks/validity.py [--cases quiet,quiet,hog1,hog2,hog4,stop100,stop300,...]
        [--duration 12] [--rate 4] [--json OUT]

Starts the testbed pinned to the last core (its ledger: the server's own arrival and first-token time of
every request, CLOCK_MONOTONIC like the records), then runs a short open-loop scenario against it with the
whole ``rushhour run`` pinned to core 0, once per case, each under an injected contention:

* ``quiet``: nothing injected (the machine's other users still count: the load average is recorded);
* ``hogN``: N busy-loop processes pinned to the generator's core (CPU contention: the scheduler shares it);
* ``stopM``: the Locust process stopped (SIGSTOP) for M ms of every second (a stalled loop: the kernel
  keeps receiving and stamping while it is stopped);
* ``wideN``: N busy loops on every core (a loaded host, as a shared CI runner);
* ``…@R``: that case at R requests/s instead of ``--rate`` (a stall at a low rate mostly hits requests
  in flight, seldom a send).

Ground truth per request (first attempts that the server saw): the first token's error is the client's
first-token time minus the ledger's; the send's lateness is the server's arrival minus the intended time.
A run is truly harmed when more than 1 % (and at least 3) of its first tokens are off by more than the
tolerance (audit.harm, 10 ms), or of its sends arrived more than 100 ms late (audit.validity). The table
shows, per run, the host's load average, the generator's CPU, the truth, the old (symptom: sustained loop
lag) and the new (harm) verdicts; then each rule's false-void and missed-harm rates.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from rushhour.audit import harm, run_audit  # noqa: E402
from rushhour.audit.load import load_run  # noqa: E402
from rushhour.audit.validity import SCHEDULE_LAG_MS, check_validity, delayed_requests  # noqa: E402
from rushhour.records.manifest import read_manifest  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
DEFAULT_CASES = ("quiet,hog1,hog2,hog4,stop50,stop150,stop300,wide2,quiet,hog3,stop100,stop500,wide4,hog6,"
                 "stop200,stop300@0.5,stop150@0.5,stop400@0.3,quiet,quiet@25,hog4@25,wide4@25,stop100@25")
SCENARIO = """
name: validity-bench
seed: {seed}
target: {{url: "{url}", profile: llm-d, model: testbed}}
tiers:
  - {{name: high, priority: 100, slo: {{ttft_ms: {{p99: 5000}}}}}}
personas:
  - kind: chat
    name: c
    tier: high
    arrival: {{process: poisson, rate: {rate}}}
    turns: 1
    system_prompt_tokens: 0
    prompt_tokens: {{dist: lognormal, median: 200, sigma: 0.5, min: 16, max: 800}}
    output_tokens: {{dist: lognormal, median: 30, sigma: 0.5, min: 4, max: 80}}
phases: [{{name: step, duration: {duration}s}}]
calibration: {{probes: 0}}
drain_s: 3
"""


def start_testbed(tmp: Path, core: int, speed: float) -> tuple[subprocess.Popen[bytes], str, Path]:
    """The testbed on its own core, with a ledger; returns (process, URL, ledger path)."""
    port_file, ledger = tmp / "port", tmp / "ledger.jsonl"
    # The ledger's times are the testbed's own (user space): real-time priority on its core keeps the machine's
    # other users from delaying them, so they stay a ground truth (without the right to, it runs as it is).
    allowed = subprocess.run(["chrt", "-f", "20", "true"], capture_output=True).returncode == 0
    rt = ["chrt", "-f", "20"] if allowed else []
    proc = subprocess.Popen([*rt, "taskset", "-c", str(core), PY, "-m", "rushhour.testbed", "--profile", "llm-d",
                             "--port", "0", "--port-file", str(port_file), "--ledger", str(ledger), "--preset", "tiny",
                             "--replicas", "2", "--speed", str(speed)], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text().strip():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the testbed did not start")
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port_file.read_text().strip()}", ledger


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _hogs(n: int, cores: str) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["taskset", "-c", cores, PY, "-c", "while True: pass"]) for _ in range(n)]


def _stopper(runs: Path, stop_ms: int, done: threading.Event) -> None:
    """Stop the run's Locust process ``stop_ms`` of every second, from 3.5 s after it started (past the anchor)."""
    pid = None
    while pid is None and not done.is_set():
        for run_dir in runs.glob("*/"):
            with contextlib.suppress(Exception):
                manifest = read_manifest(run_dir)
                if manifest.locust_pid and list((run_dir / "records").glob("*.jsonl")):
                    pid = manifest.locust_pid
        time.sleep(0.1)
    if pid is None:
        return
    time.sleep(3.5)
    try:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stop_ms / 1000)
            os.kill(pid, signal.SIGCONT)
            time.sleep(max(0.05, 1.0 - stop_ms / 1000))
    except ProcessLookupError:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def run_case(case: str, seed: int, url: str, tmp: Path, duration: float, rate: float) -> Path:
    """One run under ``case``'s contention; returns its run folder."""
    case, _, at = case.partition("@")  # "stop300@0.5": this case at 0.5 requests/s
    rate = float(at) if at else rate
    folder = tmp / f"{seed:02d}-{case}"
    folder.mkdir()
    scenario = folder / "s.yaml"
    scenario.write_text(SCENARIO.format(seed=seed, url=url, rate=rate, duration=duration))
    hogs: list[subprocess.Popen[bytes]] = []
    done = threading.Event()
    stopper = None
    if case.startswith("hog"):
        hogs = _hogs(int(case[3:]), "0")
    elif case.startswith("wide"):
        hogs = _hogs(int(case[4:]), ",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    elif case.startswith("stop"):
        stopper = threading.Thread(target=_stopper, args=(folder / "runs", int(case[4:]), done), daemon=True)
        stopper.start()
    try:
        subprocess.run(["taskset", "-c", "0", str(ROOT / ".venv" / "bin" / "rushhour"), "run", str(scenario), "--out",
                        str(folder / "runs"), "--no-report"], cwd=ROOT, env=_env(), check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=duration + 120)
    finally:
        done.set()
        for hog in hogs:
            hog.kill()
            hog.wait()
        if stopper is not None:
            stopper.join(timeout=5)
    runs = [p for p in (folder / "runs").glob("*/") if (p / "run.json").exists()]
    if not runs:
        raise SystemExit(f"{case}: no run folder")
    return runs[0]


def truth(run_dir: Path, ledger_path: Path) -> dict[str, Any]:
    """Per-request errors against the ledger, and whether the run was truly harmed."""
    data = load_run(run_dir)
    anchor = float(data.manifest.mono_anchor_ns or 0)
    req = data.requests
    ledger: dict[str, dict[str, Any]] = {}
    with ledger_path.open() as f:
        for line in f:
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                ledger[str(obj.get("request_id"))] = obj
    ft_err, late = [], []
    for rid, attempt, intended, first in zip(req["request_id"].astype(str), req["attempt"].fillna(1),
                                             req["intended_ns"].to_numpy(dtype=np.float64),
                                             req["first_token_ns"].to_numpy(dtype=np.float64), strict=True):
        row = ledger.get(rid)
        if row is None or attempt > 1:
            continue
        if row.get("arrival_ns") is not None and np.isfinite(intended):
            late.append((row["arrival_ns"] - anchor - intended) / 1e6)
        if row.get("first_token_ns") is not None and np.isfinite(first):
            ft_err.append((first - (row["first_token_ns"] - anchor)) / 1e6)
    ft = np.array(ft_err)
    lt = np.array(late)
    too_moved, moved, _ = harm.moved_first_tokens(ft * 1e6)
    too_late, n_late = delayed_requests(lt)
    return {"ft_err_p50_ms": float(np.median(ft)) if len(ft) else None,
            "ft_err_p99_ms": float(np.quantile(ft, 0.99)) if len(ft) else None,
            "ft_err_max_ms": float(ft.max()) if len(ft) else None, "moved": moved, "late": n_late,
            "tokens": len(ft), "sends": len(lt), "harmed": bool(too_moved or too_late)}


def verdicts(run_dir: Path) -> dict[str, Any]:
    """The new (harm) verdict from the audit, and the old (symptom) one: the same rule on records without the
    first-token facts, which is how records of older writers are judged."""
    summary = run_audit(run_dir, write=False)
    v = summary.validity
    data = load_run(run_dir)
    attempts = data.requests.drop(columns=["first_token_clock"])
    attempts["schedule_lag_ns"] = attempts["sent_ns"] - attempts["intended_ns"]
    old = check_validity(attempts, data.health, skipped_lines=0, truncated_shards=0)
    health = data.health[data.health["ts_ns"] >= 0]
    load = health["load1"].to_numpy(dtype=np.float64) if "load1" in health.columns else np.zeros(0)
    cpu = health["cpu_percent"].to_numpy(dtype=np.float64)
    return {"valid": v.valid, "reasons": v.reasons, "warnings": v.warnings, "cause": v.cause,
            "old_valid": old.valid, "old_reasons": old.reasons, "moved_est": v.first_tokens_moved,
            "late_est": v.delayed_requests, "lag_p99_ms": v.loop_lag_p99_ms,
            "load1_mean": float(np.nanmean(load)) if np.isfinite(load).any() else None,
            "cpu_mean": float(np.nanmean(cpu)) if np.isfinite(cpu).any() else None}


def _fmt(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def rates(rows: list[dict[str, Any]], key: str) -> tuple[str, str]:
    """(false-void rate, missed-harm rate) of a verdict column against the truth."""
    fine = [r for r in rows if not r["harmed"]]
    bad = [r for r in rows if r["harmed"]]
    fv = sum(1 for r in fine if not r[key])
    mh = sum(1 for r in bad if r[key])
    return (f"{fv}/{len(fine)}" + (f" ({fv / len(fine):.0%})" if fine else ""),
            f"{mh}/{len(bad)}" + (f" ({mh / len(bad):.0%})" if bad else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--speed", type=float, default=0.2, help="the testbed's time scale (0.2: ~10 ms per token)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="rh-validity-") as name:
        tmp = Path(name)
        testbed, url, ledger = start_testbed(tmp, cores[-1], args.speed)
        rows: list[dict[str, Any]] = []
        try:
            print(f"{'#':>2} {'case':<8} {'load1':>5} {'cpu%':>5} {'lag p99':>8} {'ft err p50/p99/max ms':>22} "
                  f"{'moved t/e':>9} {'late t/e':>8} {'truth':>7} {'old':>7} {'new':>7}", flush=True)
            for i, case in enumerate(args.cases.split(",")):
                run_dir = run_case(case, i + 1, url, tmp, args.duration, args.rate)
                row = {"case": case, **truth(run_dir, ledger), **verdicts(run_dir)}
                rows.append(row)
                print(f"{i + 1:>2} {case:<8} {_fmt(row['load1_mean']):>5} {_fmt(row['cpu_mean'], 0):>5} "
                      f"{_fmt(row['lag_p99_ms'], 0):>8} "
                      f"{_fmt(row['ft_err_p50_ms']):>6}/{_fmt(row['ft_err_p99_ms']):>6}/{_fmt(row['ft_err_max_ms']):>6}"
                      f" {row['moved']:>4}/{row['moved_est']:<4} {row['late']:>3}/{row['late_est']:<4}"
                      f" {'HARMED' if row['harmed'] else 'ok':>7} {'valid' if row['old_valid'] else 'INVALID':>7}"
                      f" {'valid' if row['valid'] else 'INVALID':>7}", flush=True)
        finally:
            testbed.terminate()
            testbed.wait(timeout=10)
    for key, label in (("old_valid", "old rule (sustained loop lag)"), ("valid", "new rule (harm)")):
        fv, mh = rates(rows, key)
        print(f"{label}: false voids {fv}, missed harm {mh}")
    print(f"tolerances: first token {harm.FIRST_TOKEN_TOLERANCE_MS:.0f} ms, send {SCHEDULE_LAG_MS:.0f} ms "
          f"(> {harm.MOVED_SHARE:.0%} of them and at least {harm.MOVED_MIN})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
