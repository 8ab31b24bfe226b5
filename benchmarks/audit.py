"""Audit throughput: synthesise runs of 100k / 1M / 10M request records, audit each in a fresh process.

    .venv/bin/python benchmarks/audit.py                 # 100k, 1M
    .venv/bin/python benchmarks/audit.py --sizes 100000 1000000 10000000 --keep /tmp/b   # + 10M: ~10 GB of disk
    .venv/bin/python benchmarks/audit.py --before /tmp/old-checkout   # the old code too, same runs, same sitting

Each size is written as 4 shards (4 Locust processes) with a realistic mix: three tiers, several
tenants, chat and agent personas, 84 % served, queue-full / TTL / eviction drops with llm-d's exact
headers and bodies, 5xx, client timeouts, 5 % retries, health lines every second per process and a
metrics.jsonl. Wall time, CPU time and peak RSS are measured inside a subprocess per size
(``getrusage``), so one size's memory does not hide another's: once for the audit in memory (no
table), once as ``rushhour audit`` runs it (summary.json and attempts.parquet written), followed by
the re-audit of the unchanged run (``audit.current_summary``: the inputs' fingerprint) and a read of
the attempts table. ``--before DIR`` audits the same runs with the code checked out in DIR first
(the figures before a change, measured beside the new ones); the load average is printed with each
row because other work on the machine inflates wall times (CPU time is steadier). System time is
printed apart: on a VM that reports free pages to its host (virtio-balloon), the first touch of memory
the guest has not used in the last seconds costs ≈ 2.5 s of system time per GB here, which a 10M audit's
5.5 GB peak pays in full. The shards are
written through ``ShardWriter``, so each has its columnar sidecar, sealed at close: "after" reads them (a
sealed shard's JSONL is not read at all), "jsonl" is the same code told to ignore them (every line parsed,
as for a shard shipped without one). Runs kept from before the seal (``--keep``) are read with the checksums.
Before each audit the run's files are read into the page cache (``--cache warm``, as right after a run);
``--cache cold`` drops the cache instead (root), ``--cache as-found`` leaves it: a 1M run's 1.7 GB of files
stay cached between audits and a 10M run's 18 GB do not, which made their ratio partly the disk's.
Goal (#13): 1M records in < 4 s and < 800 MB, a re-audit < 1 s, linear growth.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rushhour.records.manifest import write_manifest  # noqa: E402
from rushhour.records.record import Anchor, HealthRecord, RequestRecord, ShardWriter  # noqa: E402

PROCESSES = 4
RATE_PER_S = 300.0  # offered attempts per second: 1M records ≈ 55 min of run
ANCHOR_NS = 10_000 * 10**9

SAT = "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
TTL = ("inference error: ResourceExhausted - request timed out in queue: request evicted from queue: "
       "request TTL expired")
EVICT = "inference error: ResourceExhausted - request evicted by flow control"

TIERS = [("interactive", 100, ["chat-users"]), ("standard", 0, ["api-clients"]), ("batch", -1, ["agents"])]
# outcome kind: (weight, status, reason, error, complete, first token, client_timeout)
OUTCOMES = [
    (0.84, 200, None, None, True, True, False),
    (0.08, 429, "rejected-saturated", SAT, False, False, False),
    (0.03, 429, "rejected-ttl-expired", TTL, False, False, False),
    (0.01, 429, "evicted", EVICT, False, True, False),
    (0.02, 500, None, "inference error: Internal - engine died", False, False, False),
    (0.02, 0, None, "client timeout waiting for the first token", False, False, True),
]

def synthesise(run_dir: Path, n: int, seed: int = 1, columns: bool = True) -> None:
    """Write ``n`` request records (plus health lines and metrics) as a run folder (``columns``: with sidecars)."""
    rng = np.random.default_rng(seed)
    duration_ns = int(n / RATE_PER_S * 1e9)
    scenario = {
        "name": "bench", "seed": seed, "target": {"url": "testbed", "profile": "llm-d"},
        "tiers": [{"name": t, "priority": p, "tenants": 3,
                   "slo": {"ttft_ms": {"p99": 2000}, "max_drop_rate": 0.2}} for t, p, _ in TIERS],
        "personas": [
            {"kind": "chat", "name": "chat-users", "tier": "interactive", "arrival": {"rate": 1}},
            {"kind": "chat", "name": "api-clients", "tier": "standard", "arrival": {"rate": 1}},
            {"kind": "agent_swarm", "name": "agents", "tier": "batch"},
        ],
        "phases": [{"name": "steady", "duration": duration_ns / 1e9}],
    }
    write_manifest(run_dir, {"run_id": "bench", "scenario": scenario, "mono_anchor_ns": ANCHOR_NS,
                             "wall_anchor_ns": 1_780_000_000 * 10**9, "duration_s": duration_ns / 1e9,
                             "processes": PROCESSES, "versions": {}})
    records = run_dir / "records"
    records.mkdir(parents=True, exist_ok=True)
    weights = np.array([o[0] for o in OUTCOMES])
    kinds = rng.choice(len(OUTCOMES), size=n, p=weights / weights.sum())
    tier_idx = rng.choice(3, size=n, p=[0.3, 0.3, 0.4])
    tenant_idx = rng.integers(0, 3, size=n)
    intended = np.sort(rng.uniform(0, duration_ns, size=n)).astype(np.int64)
    lag = rng.exponential(2e6, size=n).astype(np.int64)
    ttft = (rng.lognormal(np.log(300e6), 0.8, size=n) * np.where(tier_idx == 2, 3.0, 1.0)).astype(np.int64)
    out_tokens = rng.integers(8, 400, size=n)
    prompt = rng.integers(100, 8000, size=n)
    retry = rng.random(n) < 0.05
    # through the writer the load processes use: the same lines, and each shard's columnar sidecar
    writers = [ShardWriter(records / f"bench-{p}.jsonl", run_id="bench", anchor=Anchor(ANCHOR_NS, 0),
                           flush_lines=4096, flush_interval_s=60.0, columns=columns) for p in range(PROCESSES)]
    for i in range(n):
        tier, _, personas = TIERS[tier_idx[i]]
        _, status, reason, error, complete, first, timeout = OUTCOMES[kinds[i]]
        sent = int(intended[i] + lag[i])
        rid = f"{i:032x}"
        logical = f"{i - 1:032x}" if retry[i] and i else rid
        ft = sent + int(ttft[i]) if first else None
        tokens = int(out_tokens[i]) if complete else (3 if first else 0)
        done = (ft + tokens * 20_000_000) if ft is not None else sent + (int(ttft[i]) if status else 120 * 10**9)
        writers[i % PROCESSES].write(RequestRecord(
            run_id="bench", seq=i, request_id=rid, logical_id=logical, tier=tier, tenant=f"{tier}-t{tenant_idx[i]}",
            persona=personas[0], session_id=f"s{i // 3}", task_id=f"task{i // 7}" if tier == "batch" else "",
            step=i % 7, attempt=2 if logical != rid else 1, retry_reason="429" if logical != rid else None,
            endpoint="http://127.0.0.1:8000", model="testbed-model", dialect="openai-chat",
            key_fingerprint="fp:1a2b3c4d", prompt_bytes=int(prompt[i]) * 4, intended_ns=int(intended[i]),
            sent_ns=sent, headers_ns=sent + int(ttft[i]) // 2 if status else sent, first_token_ns=ft,
            last_token_ns=done if ft else None, done_ns=done, tokens=tokens,
            itl_max_ns=30_000_000 if ft else None, itl_mean_ns=20_000_000 if ft else None, status=status,
            reason=reason, error=error, complete=complete, client_timeout=timeout,
            retry_after_s=1.0 if status == 429 else None, prompt_tokens=int(prompt[i]),
            output_tokens=tokens if complete else None, cached_tokens=0,
        ))
    for writer in writers:
        for t in range(0, duration_ns, 10**9):
            writer.write(HealthRecord(run_id="bench", seq=0, ts_ns=t, loop_lag_ns=2_000_000, cpu_percent=35.0,
                                      in_flight=40))
        writer.close()
    with (run_dir / "metrics.jsonl").open("w") as fh:
        for t in range(0, duration_ns, 5 * 10**9):
            fh.write(json.dumps({"ts_ns": t, "samples": [
                {"name": "llm_d_epp_flow_control_queue_size", "labels": {"priority": "-1"}, "value": 3.0},
                {"name": "vllm:kv_cache_usage_perc", "labels": {"pod": "a"}, "value": 0.7},
                {"name": "vllm:num_requests_waiting", "labels": {"pod": "a"}, "value": 2.0}]}) + "\n")


CHILD = """
import json, resource, sys, time
from pathlib import Path
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def sys_cpu():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime
t0 = time.perf_counter()
from rushhour import audit
if sys.argv[3] == "jsonl":  # the shards' sidecars left unread: every line parsed (a shard shipped without one)
    import rushhour.audit.load
    from rushhour import audit
    audit.load.sidecar.verified_batches = lambda *a: iter(())
t1, c1, k1 = time.perf_counter(), cpu(), sys_cpu()
run_dir, write = Path(sys.argv[1]), sys.argv[2] == "table"
(run_dir / "attempts.parquet").unlink(missing_ok=True)
s = audit.run_audit(run_dir, write=write)
t2 = time.perf_counter()
out = {"import_s": t1 - t0, "audit_s": t2 - t1, "cpu_s": cpu() - c1, "sys_s": sys_cpu() - k1, "records": s.records,
       "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if write:
    again = audit.current_summary(run_dir)  # `rushhour audit` when nothing changed
    t3 = time.perf_counter()
    table = audit.attempts(run_dir)  # what compare, drops.csv and the reports read
    t4 = time.perf_counter()
    assert again is not None and len(table) == s.records
    out.update(reaudit_s=t3 - t2, table_read_s=t4 - t3,
               table_bytes_per_attempt=(run_dir / "attempts.parquet").stat().st_size / max(1, s.records))
print(json.dumps(out))
"""


REPORTED_KIB = Path("/sys/module/page_reporting/parameters/reported_kib")


def settle(quiet_s: float = 2.0, limit_s: float = 180.0) -> float | None:
    """Wait until the host has taken back the guest's free memory (free page reporting has gone quiet).

    Every audit then starts from the same state, whatever the one before it freed: the memory it touches
    is fresh to the host, as after any idle moment. Without this, an audit that fits in what the previous
    process just freed (≈ 1 GB here) finds it still backed and pays a fifth of the first-touch cost,
    and one that does not pays it in full, which made a 10M audit look more than ten times a 1M one.
    Returns the seconds waited, or None where the kernel does not report free pages (nothing to wait for).
    """
    if not REPORTED_KIB.exists():
        return None
    t0 = time.perf_counter()
    last, since = REPORTED_KIB.read_text(), time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        time.sleep(0.25)
        now = REPORTED_KIB.read_text()
        if now != last:
            last, since = now, time.perf_counter()
        elif time.perf_counter() - since >= quiet_s:
            break
    return time.perf_counter() - t0


TOUCH = """
import resource, sys, numpy as np
a = np.ones(int(float(sys.argv[1]) * 2**30) // 8)
print(resource.getrusage(resource.RUSAGE_SELF).ru_stime)
"""


def first_touch_s_per_gib(gib: float = 1.0) -> float:
    """System time to touch ``gib`` GiB of fresh memory in a new process (after ``settle``): the VM's price per GiB."""
    settle()
    out = subprocess.run([sys.executable, "-c", TOUCH, str(gib)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip()) / gib


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def page_cache(run_dir: Path, how: str, jsonl: bool = False) -> None:
    """Put the run's files in the state ``how`` names before an audit: "warm" reads what the audit reads
    (the sidecars, or the JSONL when ``jsonl``) so it is in the page cache, as right after a run; "cold"
    drops the page cache (root only), as for a run read back from disk; "as-found" leaves it.

    Without this a 1M run (1.7 GB of files) is always cached and a 10M run (18 GB) partly not, so their
    ratio mixed the audit's growth with the disk's.
    """
    if how == "cold":
        os.sync()
        DROP_CACHES.write_text("3\n")
    elif how == "warm":
        for path in sorted((run_dir / "records").glob("*.jsonl" if jsonl else "*.arrows")):
            with path.open("rb") as handle:
                while handle.read(16 << 20):
                    pass


def measure(run_dir: Path, table: bool = True, code: Path = ROOT, jsonl: bool = False,
            settled: bool = True, cache: str = "warm") -> dict[str, float]:
    """Audit in a fresh interpreter with the code in ``code``; report its wall and CPU time (audit only) and peak RSS.

    ``table``: the audit as ``rushhour audit`` runs it (summary.json and attempts.parquet written), then
    the re-audit of the unchanged run and a read of the table; else the audit in memory (no table built).
    ``settled``: wait for free page reporting to go quiet first (``settle``), so each audit starts cold.
    """
    page_cache(run_dir, cache, jsonl)
    if settled:
        settle()
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(run_dir), "table" if table else "memory",
                          "jsonl" if jsonl else "columns"], cwd=code,
                         capture_output=True, text=True, check=True, env=env)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    result["load"] = os.getloadavg()[0]
    (run_dir / "summary.json").unlink(missing_ok=True)
    (run_dir / "attempts.parquet").unlink(missing_ok=True)
    return result


def _row(label: str, n: int, size_mb: float, gen_s: float, bare: dict[str, float], r: dict[str, float]) -> str:
    return (f"{label:>6} {n:>10} {size_mb:>9.0f} {gen_s:>6.1f} {bare['audit_s']:>10.2f} {bare['rss_mb']:>10.0f} "
            f"{r['audit_s']:>8.2f} {r['cpu_s']:>6.1f} {r.get('sys_s', float('nan')):>6.1f} "
            f"{r['audit_s'] / n * 1e6:>7.2f} {r['rss_mb']:>8.0f} "
            f"{r['reaudit_s']:>9.3f} {r['table_read_s']:>9.2f} {r['table_bytes_per_attempt']:>8.1f} {r['load']:>5.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--keep", type=Path, help="keep the synthetic runs under this folder")
    parser.add_argument("--before", type=Path, help="a checkout of the old code: audit each run with it first")
    parser.add_argument("--before-max", type=int, default=1_000_000,
                        help="largest size the old code audits (its memory grew ~1.5 GB per million)")
    parser.add_argument("--jsonl-max", type=int, default=1_000_000,
                        help="largest size audited with the sidecars ignored (every line parsed: ~4 min at 10M)")
    parser.add_argument("--as-found", action="store_true",
                        help="do not wait for the host to take back free memory before each audit (see settle)")
    parser.add_argument("--cache", choices=("warm", "cold", "as-found"), default="warm",
                        help="the run's files before each audit: read into the page cache (default, as right "
                             "after a run), dropped from it (root), or as found")
    args = parser.parse_args()
    if args.cache == "cold" and not os.access(DROP_CACHES, os.W_OK):
        parser.error(f"--cache cold drops the page cache through {DROP_CACHES}, which needs root")
    settled = not args.as_found
    if settled and REPORTED_KIB.exists():
        print(f"free page reporting: each audit starts after it goes quiet; fresh memory costs "
              f"{first_touch_s_per_gib():.2f} s of system time per GiB on this machine now")
    base = args.keep or Path(tempfile.mkdtemp(prefix="rushhour-bench-"))
    rows = []
    print(f"{'code':>6} {'records':>10} {'shards MB':>9} {'gen s':>6} {'no-table s':>10} {'no-tbl MB':>10} "
          f"{'audit s':>8} {'cpu s':>6} {'sys s':>6} {'µs/rec':>7} {'peak MB':>8} {'re-audit':>9} {'tbl read':>9} "
          f"{'tbl B/a':>8} {'load':>5}")
    for n in args.sizes:
        run_dir = base / f"run-{n}"
        t0 = time.perf_counter()
        if not (run_dir / "run.json").exists():
            # in a process of its own: a child inherits its parent's peak RSS (Linux keeps ru_maxrss across exec),
            # so writing a run in this process would show as every audit's peak
            writer = multiprocessing.get_context("spawn").Process(target=synthesise, args=(run_dir, n))
            writer.start()
            writer.join()
        gen_s = time.perf_counter() - t0
        size_mb = sum(p.stat().st_size for p in (run_dir / "records").glob("*.jsonl")) / 2**20
        codes = [("before", args.before, False)] if args.before and n <= args.before_max else []
        jsonl_case = [("jsonl", ROOT, True)] if n <= args.jsonl_max else []
        for label, code, jsonl in [*codes, ("after", ROOT, False), *jsonl_case]:
            bare = measure(run_dir, table=False, code=code, jsonl=jsonl, settled=settled, cache=args.cache)
            r = measure(run_dir, code=code, jsonl=jsonl, settled=settled, cache=args.cache)
            rows.append({"code": label, "records": n, "shards_mb": size_mb, "no_table_audit_s": bare["audit_s"],
                         "no_table_cpu_s": bare["cpu_s"], "no_table_rss_mb": bare["rss_mb"], **r})
            print(_row(label, n, size_mb, gen_s, bare, r), flush=True)
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    print(json.dumps({"cpus": os.cpu_count(), "settled": settled, "cache": args.cache, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
