"""What the testbed's servers say of a request's own timing, from its job's times (pure): the same facts in the
HTTP server (headers, the ``metrics`` object) and in the simulator (record fields), so the two agree."""

from __future__ import annotations

from rushhour.testbed.job import Job
from rushhour.testbed.profiles import GATEWAY_QUEUE_HEADER, LITELLM_DURATION, LITELLM_OVERHEAD, Profile


def timing_headers(profile: Profile, job: Job | None, stream: bool) -> dict[str, str]:
    """The gateway's own timing of a dispatched request: llm-d's flow-control queue (arrival → dispatch); LiteLLM's
    overhead (arrival → the engine has it) and whole call (→ the engine's end; a stream's headers go out as the
    engine takes it, so there the whole call is the overhead)."""
    if job is None or job.dispatch_ns is None:
        return {}
    before_engine = repr((job.dispatch_ns - job.arrival_ns) / 1e6)
    if profile.gateway:
        return {GATEWAY_QUEUE_HEADER: before_engine}
    if profile.proxy_timing:
        done = job.end_ns
        whole = before_engine if stream or done is None else repr((done - job.arrival_ns) / 1e6)
        return {LITELLM_OVERHEAD: before_engine, LITELLM_DURATION: whole}
    return {}


def engine_metrics(profile: Profile, job: Job | None, output: int, stream: bool, messages: bool
                   ) -> dict[str, float] | None:
    """vLLM 0.32's per-request ``metrics`` (build_per_request_timing_metrics) from the job's times; None where the
    stack sends none (not vLLM, switched off, Anthropic's Messages, a stream through LiteLLM)."""
    if (job is None or not profile.engine_metrics or not profile.cfg.vllm.per_request_metrics or messages
            or (stream and not profile.engine_metrics_in_streams)):
        return None
    out: dict[str, float] = {}
    queued = job.dispatch_ns  # vLLM's queued_ts: the request reached the engine
    if queued is not None and job.scheduled_ns is not None:
        out["queue_time_ms"] = (job.scheduled_ns - queued) / 1e6
        if job.first_token_ns is not None:
            out["time_to_first_token_ms"] = (job.first_token_ns - job.scheduled_ns) / 1e6
    if job.first_token_ns is not None and job.end_ns is not None:
        decode = (job.end_ns - job.first_token_ns) / 1e6
        out["generation_time_ms"] = decode
        if output > 1:
            out["mean_itl_ms"] = decode / (output - 1)
        if job.scheduled_ns is not None and job.end_ns > job.scheduled_ns:
            out["tokens_per_second"] = output / ((job.end_ns - job.scheduled_ns) / 1e9)
    return out
