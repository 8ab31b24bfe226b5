"""Summary builders for the report tests, made directly from the contract (never from the audit code)."""

from __future__ import annotations

import math
import random
from pathlib import Path

from rushhour.audit.stats import wilson
from rushhour.audit.summary import (
    POLICY_DROP_CLASSES,
    UNSERVED_CLASSES,
    CrossCheck,
    Evidence,
    Fairness,
    Finding,
    Floor,
    Inflation,
    Latency,
    Percentiles,
    RouteSummary,
    RunInfo,
    SaturationSlice,
    Summary,
    TaskStats,
    TenantSummary,
    TierSeries,
    TierSummary,
    Timeline,
    Validity,
    Verdict,
    Window,
)
from rushhour.records.manifest import write_manifest

HOSTILE_ERROR = "<script>alert(1)</script> upstream said </script><img src=x onerror=alert(2)>"
HOSTILE_REASON = "</script><script>alert(3)</script>"


def pct(n: int, p50: float, p90: float, p99: float, spread: float = 0.08) -> Percentiles:
    """Percentiles with plausible bootstrap intervals."""
    if n == 0:
        return Percentiles(n=0)
    return Percentiles(
        n=n,
        mean=p50 * 1.1,
        p50=p50,
        p90=p90,
        p95=(p90 + p99) / 2,
        p99=p99,
        max=p99 * 1.3,
        ci={k: (v * (1 - spread), v * (1 + spread)) for k, v in (("p50", p50), ("p90", p90), ("p99", p99))},
    )


def cdf(p50: float, p99: float) -> list[float]:
    """A lognormal-ish TTFT quantile function at 0.00 … 1.00."""
    sigma = math.log(p99 / p50) / 2.326
    out = []
    for i in range(101):
        q = min(max(i / 100, 0.001), 0.999)
        z = math.sqrt(2) * _erfinv(2 * q - 1)
        out.append(round(p50 * math.exp(sigma * z), 2))
    return out


def _erfinv(y: float) -> float:
    a = 0.147
    ln = math.log(1 - y * y)
    first = 2 / (math.pi * a) + ln / 2
    return math.copysign(math.sqrt(math.sqrt(first * first - ln / a) - first), y)


def tier(
    name: str,
    priority: int,
    requests: int,
    by_class: dict[str, int],
    by_status: dict[str, int],
    by_reason: dict[str, int],
    ttft: tuple[float, float, float],
    ttft_int: tuple[float, float, float],
    sat: tuple[int, dict[str, int], tuple[float, float, float]] | None,
    tenants: list[TenantSummary],
    tasks: TaskStats | None = None,
    sessions: TaskStats | None = None,
    routes: dict[str, int] | None = None,
    jain: float | None = 0.98,
    starvation: float | None = None,
    floor: Floor | None = None,
    inflation: Inflation | None = None,
) -> TierSummary:
    """One tier with self-consistent numbers."""
    served = by_class.get("served", 0)
    sent = requests - by_class.get("not_sent", 0)
    unserved = sum(v for k, v in by_class.items() if k in UNSERVED_CLASSES)
    policy = sum(v for k, v in by_class.items() if k in POLICY_DROP_CLASSES)
    attempts = sum(by_status.values())
    return TierSummary(
        name=name,
        priority=priority,
        attempts=attempts,
        requests=requests,
        by_class=by_class,
        attempts_by_class=dict(by_class),
        by_status=by_status,
        by_reason=by_reason,
        unserved=unserved,
        drop_rate=wilson(unserved, sent),
        policy_drop_rate=wilson(policy, sent),
        drop_rate_by_class={k: wilson(v, sent) for k, v in by_class.items() if k in UNSERVED_CLASSES},
        share_429=wilson(by_status.get("429", 0), attempts),
        share_503=wilson(by_status.get("503", 0), attempts),
        goodput=wilson(served, requests),
        goodput_per_s=served / 95.0,
        latency=Latency(
            ttft_ms=pct(served, *ttft),
            ttft_from_intended_ms=pct(served, *ttft_int),
            tpot_ms=pct(served, 22.0, 31.0, 48.0),
            itl_max_ms=pct(served, 60.0, 140.0, 420.0),
            e2e_ms=pct(served, ttft[0] + 2500, ttft[1] + 4000, ttft[2] + 6000),
            schedule_lag_ms=pct(requests, 0.4, 1.2, 3.5),
        ),
        inflation=inflation
        or Inflation(idle_ttft_ms=180.0, p50_x=ttft[0] / 180.0, p99_x=ttft[2] / 180.0, source="calibration"),
        saturation=None
        if sat is None
        else SaturationSlice(
            requests=sat[0],
            by_class=sat[1],
            drop_rate=wilson(sum(v for k, v in sat[1].items() if k in UNSERVED_CLASSES), sat[0]),
            ttft_ms=pct(sat[1].get("served", 0), *sat[2]),
            ttft_from_intended_ms=pct(sat[1].get("served", 0), *sat[2]),
        ),
        retry_amplification=attempts / requests if requests else 1.0,
        extra_attempts_in_saturation=max(0, attempts - requests),
        routes=routes or ({"primary": requests} if requests else {}),
        fairness=Fairness(jain_index=jain, tenants=tenants),
        starvation_max_gap_s=starvation,
        floor=floor or Floor(share=None, minimum=None, passed=None),
        tasks=tasks,
        sessions=sessions,
        preempted_after_first_token=by_class.get("preempted", 0) // 2,
        ttft_cdf_ms={"from_send": cdf(ttft[0], ttft[2]), "from_intended": cdf(ttft_int[0], ttft_int[2])}
        if served
        else {},
    )


def tenant(name: str, requests: int, dropped: int, p99: float | None) -> TenantSummary:
    """A tenant row."""
    return TenantSummary(
        tenant=name,
        requests=requests,
        served=requests - dropped,
        unserved=dropped,
        drop_rate=wilson(dropped, requests),
        goodput_per_s=(requests - dropped) / 95.0,
        ttft_p99_ms=p99,
    )


def tasks(n: int, completed: int, missed: int, failed: int, p50: float, p99: float) -> TaskStats:
    """Agent-task / session statistics."""
    return TaskStats(
        n=n,
        completed=completed,
        failed=failed,
        deadline_missed=missed,
        cancelled=n - completed - failed - missed,
        completion_rate=wilson(completed, n),
        deadline_miss_rate=wilson(missed, n),
        makespan_s=Percentiles(
            n=completed,
            mean=p50 * 1.1,
            p50=p50,
            p90=(p50 + p99) / 2,
            p99=p99,
            max=p99 * 1.1,
            ci={"p50": (p50 * 0.9, p50 * 1.1)},
        ),
        makespan_inflation_p50_x=p50 / 8.0 if p50 else None,
        failed_by_class={"queue_full": failed // 2, "queue_timeout": failed - failed // 2} if failed else {},
    )


def timeline(
    duration: int, bucket: float, tiers: list[str], sat: tuple[float, float], seed: int = 7, server: bool = True
) -> Timeline:
    """Per-bucket series that saturate between ``sat`` and recover."""
    rng = random.Random(seed)
    n = int(duration / bucket)
    t = [round(i * bucket, 3) for i in range(n)]
    series: dict[str, TierSeries] = {}
    depth: dict[str, list[float | None]] = {}
    for idx, name in enumerate(tiers):
        offered, served, qf, qt, failed, p50, p99 = [], [], [], [], [], [], []
        base = (3, 4, 6)[idx % 3] * bucket
        for ti in t:
            hot = sat[0] <= ti < sat[1]
            load = int(base * (3 if hot else 1) + rng.randint(0, 2))
            drop_share = (0.0, 0.12, 0.45)[idx % 3] if hot else 0.0
            q_full = int(load * drop_share * 0.8)
            q_to = int(load * drop_share * 0.2)
            fails = 1 if rng.random() < 0.02 else 0
            offered.append(load)
            qf.append(q_full)
            qt.append(q_to)
            failed.append(fails)
            served.append(max(0, load - q_full - q_to - fails))
            waited = (1.0, 4.0, 30.0)[idx % 3] if hot else 1.0
            p50.append(None if load == 0 else round(200 * waited * (0.9 + rng.random() * 0.2), 1))
            p99.append(None if load == 0 else round(800 * waited * (0.9 + rng.random() * 0.3), 1))
        series[name] = TierSeries(
            offered=offered,
            served=served,
            unserved={"queue_full": qf, "queue_timeout": qt, "failed": failed},
            ttft_p50_ms=p50,
            ttft_p99_ms=p99,
        )
        depth[str((100, 0, -1)[idx % 3])] = [
            float(int((10 + 40 * idx) if sat[0] <= ti < sat[1] else rng.randint(0, 3))) for ti in t
        ]
    return Timeline(
        bucket_s=bucket,
        t=t,
        tiers=series,
        server={"inference_extension_flow_control_queue_size": depth} if server else {},
        breaker=[
            {"t_s": 41.5, "route": "fallback", "state": "open", "previous": "closed", "cause": "3 timeouts"},
            {"t_s": 51.5, "route": "fallback", "state": "half_open", "previous": "open", "cause": "cool-down"},
            {"t_s": 52.0, "route": "fallback", "state": "closed", "previous": "half_open", "cause": "probe ok"},
        ],
    )


def realistic_summary() -> Summary:
    """A saturated three-tier run: batch dropped hard, standard a little, interactive never."""
    interactive = tier(
        "interactive",
        100,
        1200,
        {"served": 1200},
        {"200": 1200},
        {},
        (410.0, 900.0, 2100.0),
        (430.0, 950.0, 2300.0),
        (420, {"served": 420}, (520.0, 1100.0, 2600.0)),
        [tenant("tenant-a", 610, 0, 2050.0), tenant("tenant-b", 590, 0, 2150.0)],
        sessions=tasks(180, 176, 0, 0, 34.0, 61.0),
        jain=0.999,
    )
    standard = tier(
        "standard",
        0,
        1800,
        {"served": 1620, "queue_full": 150, "queue_timeout": 25, "failed": 5},
        {"200": 1625, "429": 170, "503": 12, "500": 5},
        {"rejected-saturated": 150, "rejected-ttl-expired": 25},
        (900.0, 3200.0, 8800.0),
        (1000.0, 3800.0, 9900.0),
        (630, {"served": 455, "queue_full": 150, "queue_timeout": 25}, (2400.0, 6100.0, 9700.0)),
        [tenant("tenant-a", 910, 80, 8400.0), tenant("tenant-b", 890, 95, 9100.0)],
        jain=0.991,
        routes={"primary": 1700, "fallback": 100},
    )
    batch = tier(
        "batch",
        -1,
        2400,
        {"served": 1656, "queue_full": 648, "queue_timeout": 96},
        {"200": 1656, "429": 720, "503": 24},
        {"rejected-saturated": 648, "rejected-ttl-expired": 96},
        (2600.0, 21000.0, 48000.0),
        (3100.0, 26000.0, 61000.0),
        (1050, {"served": 306, "queue_full": 648, "queue_timeout": 96}, (14000.0, 36000.0, 48000.0)),
        [tenant("agents-0", 2400, 744, 48000.0)],
        tasks=tasks(210, 150, 42, 18, 38.0, 59.0),
        jain=None,
        starvation=23.5,
        floor=Floor(share=0.06, minimum=0.10, passed=False),
    )
    tiers = [interactive, standard, batch]
    verdicts = [
        Verdict(
            tier="interactive",
            check="ttft_ms.p99",
            threshold=3000,
            observed=2100,
            bound=2268,
            judge="bound",
            passed=True,
            message="TTFT p99 2.10 s ≤ 3.00 s (upper bound 2.27 s)",
        ),
        Verdict(
            tier="interactive",
            check="max_drop_rate",
            threshold=0.01,
            observed=0.0,
            bound=0.0032,
            judge="bound",
            passed=True,
            message="drop rate 0 % ≤ 1 %",
        ),
        Verdict(
            tier="standard",
            check="ttft_ms.p99",
            threshold=10000,
            observed=8800,
            bound=9504,
            judge="bound",
            passed=True,
            message="TTFT p99 8.80 s ≤ 10.0 s",
        ),
        Verdict(
            tier="standard",
            check="max_drop_rate",
            threshold=0.10,
            observed=0.0972,
            bound=0.112,
            judge="bound",
            passed=False,
            message="drop rate upper bound 11.2 % > 10 %",
        ),
        Verdict(
            tier="batch",
            check="max_drop_rate",
            threshold=0.50,
            observed=0.31,
            bound=0.329,
            judge="bound",
            passed=True,
            message="drop rate 31 % ≤ 50 %",
        ),
        Verdict(
            tier="batch",
            check="floor_share",
            threshold=0.10,
            observed=0.06,
            bound=None,
            judge="point",
            passed=False,
            message="batch got 6 % of goodput during saturation, floor is 10 %",
        ),
    ]
    findings = [
        Finding(
            kind="starvation",
            severity="warning",
            tier="batch",
            message="batch served nothing for 23.5 s (12:00:31–12:00:54) while interactive was served",
            data={"gap_s": 23.5, "start_s": 31.0, "end_s": 54.5},
        ),
        Finding(
            kind="floor",
            severity="error",
            tier="batch",
            message="batch received 6 % of goodput during saturation, below its 10 % floor",
            data={"share": 0.06, "minimum": 0.10},
        ),
        Finding(
            kind="inversion",
            severity="warning",
            tier="standard",
            message="standard waited longer than batch in 2 of 35 saturated buckets (TTFT p50)",
            data={"buckets": 2, "of": 35},
        ),
        Finding(
            kind="preempted_in_progress",
            severity="info",
            tier="batch",
            message="0 requests were preempted after their first token",
            data={},
        ),
        Finding(
            kind="fallback_hid_outage",
            severity="warning",
            tier="standard",
            message="100 standard requests were served by the fallback route while the primary shed load",
            data={"requests": 100},
        ),
    ]
    evidence = [
        Evidence(
            tier="standard",
            request_id="req-s-0001",
            t_s=26.2,
            status=429,
            outcome="queue_full",
            reason="rejected-saturated",
            retry_after_s=1.0,
            error="queue full for band 0",
        ),
        Evidence(
            tier="standard",
            request_id="req-s-0002",
            t_s=31.9,
            status=503,
            outcome="queue_timeout",
            reason=HOSTILE_REASON,
            retry_after_s=None,
            error=HOSTILE_ERROR,
        ),
        Evidence(
            tier="batch",
            request_id="req-b-0001",
            t_s=25.4,
            status=429,
            outcome="queue_full",
            reason="rejected-saturated",
            retry_after_s=2.0,
            error="flow control: band -1 at capacity",
        ),
        Evidence(
            tier="batch",
            request_id="req-b-0002",
            t_s=40.1,
            status=429,
            outcome="queue_timeout",
            reason="rejected-ttl-expired",
            retry_after_s=None,
            error="request expired after 15 s in queue",
        ),
    ]
    return Summary(
        run=RunInfo(
            run_id="20250101-120000-demo",
            scenario="demo",
            description="Chat users on interactive, API chat on standard, an agent swarm on batch.",
            target="http://127.0.0.1:8000 (testbed)",
            profile="llm-d",
            model="testbed-model",
            seed=7,
            started_at="2025-01-01T12:00:00Z",
            duration_s=95.0,
            processes=2,
            versions={"rushhour": "0.1.0", "locust": "2.31.0", "python": "3.11.9"},
            command="rushhour run demo --processes 2",
            phases=[
                {"name": "warm-up", "start_s": 0, "end_s": 20, "rate_scale": 0.5},
                {"name": "peak", "start_s": 20, "end_s": 65, "rate_scale": 3.0},
                {"name": "recovery", "start_s": 65, "end_s": 85, "rate_scale": 0.5},
            ],
        ),
        validity=Validity(
            valid=True,
            reasons=[],
            loop_lag_p99_ms=3.1,
            cpu_max_percent=41.0,
            not_sent=0,
            schedule_lag_p99_ms=3.5,
            skipped_lines=0,
            truncated_shards=0,
        ),
        tiers=tiers,
        windows=[Window(start_s=25.0, end_s=60.0, source="both", detail="queue depth > 0 and 429s")],
        timeline=timeline(95, 1.0, ["interactive", "standard", "batch"], (25.0, 60.0)),
        findings=findings,
        verdicts=verdicts,
        passed=False,
        exit_code=1,
        routes=[
            RouteSummary(
                route="primary",
                attempts=5400,
                served=4376,
                by_class={"served": 4376, "queue_full": 798},
                ttft_p50_ms=900.0,
                ttft_p99_ms=30000.0,
                switch_reasons={},
                breaker_open_s=0.0,
            ),
            RouteSummary(
                route="fallback",
                attempts=100,
                served=100,
                by_class={"served": 100},
                ttft_p50_ms=700.0,
                ttft_p99_ms=1900.0,
                switch_reasons={"status_429": 80, "timeout": 20},
                breaker_open_s=10.0,
            ),
        ],
        crosscheck=[
            CrossCheck(tier="batch", priority=-1, metric="rejected_total", client=744, server=744.0, matches=True)
        ],
        evidence=evidence,
        records=5500,
        tasks=390,
    )


def edge_summary() -> Summary:
    """An invalid run with a tier that sent nothing and no fallback, no windows, no server metrics."""
    base = realistic_summary()
    empty = tier(
        "idle",
        -10,
        0,
        {},
        {},
        {},
        (1.0, 1.0, 1.0),
        (1.0, 1.0, 1.0),
        None,
        [],
        jain=None,
        inflation=Inflation(idle_ttft_ms=None, p50_x=None, p99_x=None),
    )
    tl = timeline(30, 1.0, ["interactive", "idle"], (1e9, 1e9), server=False)
    tl.breaker = []
    tl.tiers["idle"] = TierSeries(
        offered=[0] * 30, served=[0] * 30, unserved={}, ttft_p50_ms=[None] * 30, ttft_p99_ms=[None] * 30
    )
    return base.model_copy(
        update={
            "tiers": [base.tiers[0], empty],
            "windows": [],
            "timeline": tl,
            "findings": [],
            "routes": [],
            "evidence": [],
            "crosscheck": [],
            "verdicts": [
                Verdict(
                    tier="idle",
                    check="max_drop_rate",
                    threshold=0.1,
                    observed=None,
                    bound=None,
                    judge="point",
                    passed=False,
                    message="no requests: cannot judge",
                )
            ],
            "validity": Validity(
                valid=False,
                reasons=[
                    "generator loop lag p99 250 ms > 50 ms: tail latency not trustworthy",
                    "1 200 requests not sent on schedule",
                ],
                loop_lag_p99_ms=250.0,
                cpu_max_percent=99.0,
                not_sent=1200,
                schedule_lag_p99_ms=900.0,
                skipped_lines=3,
                truncated_shards=1,
            ),
            "passed": False,
            "exit_code": 2,
            "run": base.run.model_copy(update={"run_id": "edge", "started_at": "not-a-date", "phases": []}),
        }
    )


def big_summary(requests: int = 1_000_000, buckets: int = 86_400, tenants: int = 2000) -> Summary:
    """A 1M-request day-long run: long timeline and many tenants."""
    base = realistic_summary()
    names = [t.name for t in base.tiers]
    tl = timeline(buckets, 1.0, names, (30_000.0, 40_000.0))
    per = requests // 3
    tiers = []
    for t in base.tiers:
        rows = [tenant(f"tenant-{i:05d}", per // tenants, (per // tenants) // 10, 1000.0 + i) for i in range(tenants)]
        tiers.append(t.model_copy(update={"requests": per, "fairness": Fairness(jain_index=0.93, tenants=rows)}))
    evidence = [e for e in base.evidence] * 25
    return base.model_copy(
        update={
            "tiers": tiers,
            "timeline": tl,
            "evidence": evidence,
            "records": requests,
            "run": base.run.model_copy(update={"duration_s": float(buckets)}),
            "windows": [
                Window(start_s=30_000.0 + 600 * i, end_s=30_300.0 + 600 * i, source="outcomes") for i in range(16)
            ],
        }
    )


def write_records(run_dir: Path, run_id: str = "20250101-120000-demo") -> int:
    """A small run (run.json, one shard): served, rejected, timed-out and hostile attempts; returns the drops."""
    from rushhour.records.record import Anchor, RequestRecord, ShardWriter

    write_manifest(run_dir, {"run_id": run_id, "seed": 1, "mono_anchor_ns": 0, "wall_anchor_ns": 0,
                             "target": {"url": "testbed", "profile": "llm-d"}})
    drops = 0
    with ShardWriter.for_process(run_dir, run_id=run_id, anchor=Anchor(mono_ns=0, wall_ns=0)) as writer:
        for i in range(40):
            tier_name = ("interactive", "standard", "batch")[i % 3]
            rec = RequestRecord(
                run_id=run_id,
                seq=writer.next_seq(),
                request_id=f"r{i:03d}",
                logical_id=f"l{i:03d}",
                tier=tier_name,
                tenant="tenant-a",
                persona="chat",
                intended_ns=i * 10**9,
                sent_ns=i * 10**9 + 1000,
                status=200,
                complete=True,
                first_token_ns=i * 10**9 + 10**8,
            )
            if tier_name == "batch" and i % 2 == 0:
                rec.status, rec.complete, rec.reason, rec.retry_after_s = 429, False, "rejected-saturated", 2.0
                rec.error = HOSTILE_ERROR if i == 2 else '=HYPERLINK("http://evil")'
                drops += 1
            if tier_name == "standard" and i % 4 == 1:
                rec.status, rec.complete, rec.client_timeout = 0, False, True
                drops += 1
            writer.write(rec)
    return drops
