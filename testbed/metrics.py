"""Prometheus text exposition in vLLM and llm-d EPP metric names."""

from __future__ import annotations

from rushhour.testbed.flow import CONFIRMATION_BUCKETS
from rushhour.testbed.stack import Stack


def _q(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"')


def render(stack: Stack) -> str:
    """The /metrics page."""
    eng = stack.engine
    model = stack.cfg.models[0]
    out: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[dict[str, object], float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lab = ",".join(f'{k}="{_q(v)}"' for k, v in labels.items())
            out.append(f"{name}{{{lab}}} {value}" if lab else f"{name} {value}")

    reps = eng.replicas

    def per(fn: object) -> list[tuple[dict[str, object], float]]:
        assert callable(fn)
        return [({"model_name": model, "engine": str(r.index)}, float(fn(r))) for r in reps]

    family("vllm:num_requests_waiting", "gauge", "Requests waiting to be processed.", per(lambda r: r.n_waiting))
    family("vllm:num_requests_running", "gauge", "Requests in the running batch.",
           per(lambda r: len(r.running)))
    family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 = 100 percent.", per(lambda r: r.kv_usage()))
    family("vllm:num_preemptions_total", "counter", "Cumulative preemptions.",
           per(lambda r: r.preemptions_total))
    family("vllm:prefix_cache_queries_total", "counter", "Prefix-cache queries, in tokens.",
           per(lambda r: r.prefix_queries_total))
    family("vllm:prefix_cache_hits_total", "counter", "Prefix-cache hits, in tokens.",
           per(lambda r: r.prefix_hits_total))
    for key, name, help_ in (("queue", "vllm:request_queue_time_seconds", "Time in the waiting queue."),
                             ("prefill", "vllm:request_prefill_time_seconds", "Time from scheduling to first token.")):
        total_ns, count = stack.engine_times[key]
        family(name, "histogram", help_, [])
        out.append(f'{name}_sum{{model_name="{_q(model)}"}} {total_ns / 1e9!r}')
        out.append(f'{name}_count{{model_name="{_q(model)}"}} {float(count)}')
    pool = "testbed-pool"
    flow = stack.flow
    if flow is not None:
        family("llm_d_epp_flow_control_requests_total", "counter", "Flow-control requests by outcome.",
               [({"inference_pool": pool, "priority": p, "outcome": o}, float(n))
                for (p, o), n in sorted(flow.outcomes.items())])
        name = "llm_d_epp_flow_control_request_queue_duration_seconds"  # per tenant, capped as llm-d caps it
        family(name, "histogram", "Time in flow control until a request left it, by fairness_id, priority and "
               "outcome (at most fairness_id_cap fairness_id values; later tenants under \"other\").", [])
        for (fid, p, o), n in sorted(flow.left_count.items()):
            labels = f'inference_pool="{pool}",fairness_id="{_q(fid)}",priority="{p}",outcome="{_q(o)}"'
            out.append(f"{name}_sum{{{labels}}} {flow.left_wait_ns[fid, p, o] / 1e9!r}")
            out.append(f"{name}_count{{{labels}}} {float(n)}")
        family("llm_d_epp_flow_control_queue_size", "gauge", "Requests queued in flow control.",
               [({"inference_pool": pool, "priority": p}, float(n)) for p, n in sorted(flow.queue_sizes().items())])
        family("llm_d_epp_flow_control_queue_bytes", "gauge", "Bytes queued in flow control.",
               [({"inference_pool": pool, "priority": p}, float(b.bytes)) for p, b in sorted(flow.bands.items())])
    rv = stack.revocations
    if rv is not None:  # llm-d demand-driven revocation (llm-d-router docs/metrics.md); priority: the victim's
        family("llm_d_epp_flow_control_revocations_issued_total", "counter",
               "Revocations of running sheddable requests issued, by the victim's priority.",
               [({"inference_pool": pool, "priority": p}, float(n)) for p, n in sorted(rv.issued.items())])
        family("llm_d_epp_flow_control_revocations_total", "counter", "Revocations by outcome.",
               [({"inference_pool": pool, "outcome": o}, float(n)) for o, n in sorted(rv.outcomes.items())])
        family("llm_d_epp_flow_control_reclaim_target", "gauge",
               "Blocked requests of priority >= 0 the revocations make room for.",
               [({"inference_pool": pool}, float(rv.reclaim_target))])
        family("llm_d_epp_flow_control_pending_reclaim", "gauge", "Revocations issued and not yet confirmed.",
               [({"inference_pool": pool}, float(len(rv.pending)))])
        name = "llm_d_epp_flow_control_revocation_confirmation_seconds"
        family(name, "histogram", "Time from a revocation to its confirmation.", [])
        cumulative = 0
        for le, n in zip(CONFIRMATION_BUCKETS, rv.buckets, strict=True):
            cumulative += n
            out.append(f'{name}_bucket{{inference_pool="{pool}",le="{le}"}} {float(cumulative)}')
        out.append(f'{name}_bucket{{inference_pool="{pool}",le="+Inf"}} {float(rv.confirm_count)}')
        out.append(f'{name}_sum{{inference_pool="{pool}"}} {rv.confirm_sum_s!r}')
        out.append(f'{name}_count{{inference_pool="{pool}"}} {float(rv.confirm_count)}')
    family("llm_d_epp_flow_control_pool_saturation", "gauge", "Pool saturation (utilization detector).",
           [({"inference_pool": pool}, eng.saturation())])
    lags = sorted(eng.lag_s)
    p99 = lags[int(0.99 * (len(lags) - 1))] if lags else 0.0
    family("testbed_step_lag_p99_seconds", "gauge", "p99 lateness of replica step timers (recent steps).",
           [({}, p99)])
    return "\n".join(out) + "\n"
