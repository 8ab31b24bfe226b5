"""Audit throughput: synthesise runs of 100k / 1M / 5M request records, audit each in a fresh process.

    .venv/bin/python benchmarks/audit.py                 # 100k, 1M, 5M
    .venv/bin/python benchmarks/audit.py --sizes 100000 1000000 --keep /tmp/bench

Each size is written as 4 shards (4 Locust processes) with a realistic mix: three tiers, several
tenants, chat and agent personas, 84 % served, queue-full / TTL / eviction drops with llm-d's exact
headers and bodies, 5xx, client timeouts, 5 % retries, health lines every second per process and a
metrics.jsonl. Wall time and peak RSS are measured inside a subprocess per size (``getrusage``), so
one size's memory does not hide another's: once for the audit in memory (no table), once as
``rushhour audit`` runs it (summary.json and attempts.parquet written), followed by the re-audit of the
unchanged run (``audit.current_summary``: the inputs' fingerprint) and a read of the attempts table.
Goal: 1M records in < 10 s and < 2 GB, linear growth.
"""

from __future__ import annotations

import argparse
import json
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

from loadgen.manifest import write_manifest  # noqa: E402

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

LINE = (
    '{"run_id":"bench","seq":%d,"request_id":"%s","logical_id":"%s","tier":"%s","tenant":"%s","persona":"%s",'
    '"session_id":"%s","task_id":"%s","step":%d,"fanout_index":0,"attempt":%d,"retry_reason":%s,"route":"primary",'
    '"endpoint":"http://127.0.0.1:8000","model":"testbed-model","dialect":"openai-chat","stream":true,'
    '"key_fingerprint":"fp:1a2b3c4d","prompt_bytes":%d,"intended_ns":%d,"sent_ns":%d,"headers_ns":%d,'
    '"first_token_ns":%s,"last_token_ns":%s,"done_ns":%d,"tokens":%d,"itl_max_ns":%s,"itl_mean_ns":%s,'
    '"status":%d,"reason":%s,"error":%s,"in_band_error":null,"complete":%s,"cancelled":false,"not_sent":false,'
    '"client_timeout":%s,"transport_error":false,"retry_after_s":%s,"prompt_tokens":%d,"output_tokens":%s,'
    '"cached_tokens":%d,"service_tier":null,"kind":"request","schema":1}\n'
)


def _js(value: object) -> str:
    return json.dumps(value)


def synthesise(run_dir: Path, n: int, seed: int = 1) -> None:
    """Write ``n`` request records (plus health lines and metrics) as a run folder."""
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
    handles = [(records / f"bench-{p}.jsonl").open("w") for p in range(PROCESSES)]
    for p, fh in enumerate(handles):
        fh.write(json.dumps({"kind": "shard", "schema": 1, "run_id": "bench", "host": "bench", "pid": p,
                             "mono_anchor_ns": ANCHOR_NS, "wall_anchor_ns": 0}) + "\n")
    buffers: list[list[str]] = [[] for _ in range(PROCESSES)]
    for i in range(n):
        tier, _, personas = TIERS[tier_idx[i]]
        _, status, reason, error, complete, first, timeout = OUTCOMES[kinds[i]]
        sent = int(intended[i] + lag[i])
        rid = f"{i:032x}"
        logical = f"{i - 1:032x}" if retry[i] and i else rid
        ft = sent + int(ttft[i]) if first else None
        tokens = int(out_tokens[i]) if complete else (3 if first else 0)
        done = (ft + tokens * 20_000_000) if ft is not None else sent + (int(ttft[i]) if status else 120 * 10**9)
        buffers[i % PROCESSES].append(LINE % (
            i, rid, logical, tier, f"{tier}-t{tenant_idx[i]}", personas[0], f"s{i // 3}",
            f"task{i // 7}" if tier == "batch" else "", i % 7, 2 if logical != rid else 1,
            '"429"' if logical != rid else "null", int(prompt[i]) * 4, int(intended[i]), sent,
            sent + int(ttft[i]) // 2 if status else sent, _js(ft), _js(done if ft else None), done, tokens,
            _js(30_000_000 if ft else None), _js(20_000_000 if ft else None), status, _js(reason), _js(error),
            "true" if complete else "false", "true" if timeout else "false", "1.0" if status == 429 else "null",
            int(prompt[i]), _js(tokens if complete else None), 0,
        ))
        if len(buffers[i % PROCESSES]) >= 20_000:
            handles[i % PROCESSES].write("".join(buffers[i % PROCESSES]))
            buffers[i % PROCESSES].clear()
    for p, fh in enumerate(handles):
        fh.write("".join(buffers[p]))
        for t in range(0, duration_ns, 10**9):
            fh.write(json.dumps({"kind": "health", "run_id": "bench", "seq": 0, "ts_ns": t, "loop_lag_ns": 2_000_000,
                                 "cpu_percent": 35.0, "in_flight": 40, "not_sent_total": 0, "sent_total": 0,
                                 "schema": 1}) + "\n")
        fh.close()
    with (run_dir / "metrics.jsonl").open("w") as fh:
        for t in range(0, duration_ns, 5 * 10**9):
            fh.write(json.dumps({"ts_ns": t, "samples": [
                {"name": "llm_d_epp_flow_control_queue_size", "labels": {"priority": "-1"}, "value": 3.0},
                {"name": "vllm:kv_cache_usage_perc", "labels": {"pod": "a"}, "value": 0.7},
                {"name": "vllm:num_requests_waiting", "labels": {"pod": "a"}, "value": 2.0}]}) + "\n")


CHILD = """
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
import audit
t1 = time.perf_counter()
run_dir, write = Path(sys.argv[1]), sys.argv[2] == "table"
(run_dir / "attempts.parquet").unlink(missing_ok=True)
s = audit.run_audit(run_dir, write=write)
t2 = time.perf_counter()
out = {"import_s": t1 - t0, "audit_s": t2 - t1, "records": s.records,
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


def measure(run_dir: Path, table: bool = True) -> dict[str, float]:
    """Audit in a fresh interpreter; report its wall time (audit only) and peak RSS.

    ``table``: the audit as ``rushhour audit`` runs it (summary.json and attempts.parquet written), then
    the re-audit of the unchanged run and a read of the table; else the audit in memory (no table built).
    """
    out = subprocess.run([sys.executable, "-c", CHILD, str(run_dir), "table" if table else "memory"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 5_000_000])
    parser.add_argument("--keep", type=Path, help="keep the synthetic runs under this folder")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="rushhour-bench-"))
    rows = []
    print(f"{'records':>10} {'shards MB':>10} {'gen s':>7} {'no-table s':>10} {'audit s':>8} {'µs/rec':>7} "
          f"{'peak RSS MB':>12} {'re-audit s':>10} {'table read s':>12} {'table B/att':>11}")
    for n in args.sizes:
        run_dir = base / f"run-{n}"
        t0 = time.perf_counter()
        if not (run_dir / "run.json").exists():
            synthesise(run_dir, n)
        gen_s = time.perf_counter() - t0
        size_mb = sum(p.stat().st_size for p in (run_dir / "records").glob("*.jsonl")) / 2**20
        bare = measure(run_dir, table=False)
        r = measure(run_dir)
        rows.append({"records": n, "shards_mb": size_mb, "no_table_audit_s": bare["audit_s"],
                     "no_table_rss_mb": bare["rss_mb"], **r})
        print(f"{n:>10} {size_mb:>10.0f} {gen_s:>7.1f} {bare['audit_s']:>10.2f} {r['audit_s']:>8.2f} "
              f"{r['audit_s'] / n * 1e6:>7.2f} {r['rss_mb']:>12.0f} {r['reaudit_s']:>10.3f} {r['table_read_s']:>12.2f} "
              f"{r['table_bytes_per_attempt']:>11.1f}", flush=True)
        (run_dir / "summary.json").unlink(missing_ok=True)
        (run_dir / "attempts.parquet").unlink(missing_ok=True)
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    print(json.dumps({"cpus": os.cpu_count(), "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
