"""Hand-built ``Summary`` objects for the capacity tests (no dependency on the audit implementation)."""

from __future__ import annotations

from rushhour.audit.stats import wilson
from rushhour.audit.summary import (
    Fairness,
    Floor,
    Inflation,
    Latency,
    Percentiles,
    RunInfo,
    Summary,
    TierSummary,
    Timeline,
    Validity,
    Verdict,
)


def pct(n: int, p99: float | None, spread: float = 0.1) -> Percentiles:
    """Percentiles around a p99 with a ±spread interval."""
    if not n or p99 is None:
        return Percentiles(n=0)
    return Percentiles(n=n, mean=p99 / 3, p50=p99 / 4, p90=p99 / 2, p95=p99 * 0.7, p99=p99, max=p99 * 1.2,
                       ci={"p99": (p99 * (1 - spread), p99 * (1 + spread)), "p50": (p99 / 5, p99 / 3)})


def tier(name: str, priority: int, requests: int, dropped: int, ttft_p99: float | None,
         e2e_p99: float | None = None, spread: float = 0.1, duration: float = 10.0) -> TierSummary:
    """One tier: ``dropped`` requests rejected (queue full), the rest served."""
    served = requests - dropped
    by_class = {"served": served} | ({"queue_full": dropped} if dropped else {})
    e2e = e2e_p99 if e2e_p99 is not None else (ttft_p99 * 2 if ttft_p99 else None)
    return TierSummary(
        name=name, priority=priority, attempts=requests, requests=requests, by_class=by_class,
        attempts_by_class=dict(by_class), by_status={"200": served, "429": dropped}, by_reason={},
        unserved=dropped, drop_rate=wilson(dropped, requests), policy_drop_rate=wilson(dropped, requests),
        drop_rate_by_class={"queue_full": wilson(dropped, requests)},
        share_429=wilson(dropped, requests), share_503=wilson(0, requests), goodput=wilson(served, requests),
        goodput_per_s=served / duration,
        latency=Latency(ttft_ms=pct(served, ttft_p99, spread), ttft_from_intended_ms=pct(served, ttft_p99, spread),
                        tpot_ms=Percentiles(n=0), itl_max_ms=Percentiles(n=0), e2e_ms=pct(served, e2e, spread),
                        schedule_lag_ms=Percentiles(n=0)),
        inflation=Inflation(idle_ttft_ms=None, p50_x=None, p99_x=None), saturation=None, retry_amplification=1.0,
        extra_attempts_in_saturation=0, routes={"primary": requests}, fairness=Fairness(jain_index=None, tenants=[]),
        starvation_max_gap_s=None, floor=Floor(share=None, minimum=None, passed=None), tasks=None, sessions=None,
        preempted_after_first_token=0,
    )


def verdicts_for(t: TierSummary, ttft_p99_max: float | None, max_drop: float | None) -> list[Verdict]:
    """Point verdicts of a tier against a TTFT p99 ceiling and a drop-rate ceiling."""
    out = []
    if ttft_p99_max is not None:
        obs = t.latency.ttft_ms.p99
        ok = obs is not None and obs <= ttft_p99_max
        out.append(Verdict(tier=t.name, check="ttft_ms.p99", threshold=ttft_p99_max, observed=obs, bound=None,
                           judge="point", passed=ok, message=""))
    if max_drop is not None:
        obs = t.drop_rate.value
        ok = obs is not None and obs <= max_drop
        out.append(Verdict(tier=t.name, check="max_drop_rate", threshold=max_drop, observed=obs, bound=None,
                           judge="point", passed=ok, message=""))
    return out


def summary(tiers: list[TierSummary], verdicts: list[Verdict], *, run_id: str = "r1", scenario: str = "s",
            seed: int = 1, duration: float = 10.0, valid: bool = True) -> Summary:
    """A minimal, consistent summary."""
    return Summary(
        run=RunInfo(run_id=run_id, scenario=scenario, target="testbed", profile="llm-d", model="m", seed=seed,
                    started_at="2026-01-01T00:00:00Z", duration_s=duration, processes=1, versions={}),
        validity=Validity(valid=valid, reasons=[] if valid else ["generator overloaded"], loop_lag_p99_ms=None,
                          cpu_max_percent=None, not_sent=0, schedule_lag_p99_ms=None, skipped_lines=0,
                          truncated_shards=0),
        tiers=tiers, windows=[], timeline=Timeline(bucket_s=1.0, t=[], tiers={}), findings=[], verdicts=verdicts,
        passed=all(v.passed for v in verdicts), exit_code=0 if all(v.passed for v in verdicts) else 1, routes=[],
        crosscheck=[], evidence=[], records=sum(t.requests for t in tiers), tasks=0,
    )
