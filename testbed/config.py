"""Testbed configuration: dataclasses loaded from YAML with errors that name the bad key."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rushhour.testbed.typed import ConfigError, from_dict

__all__ = ["PROFILES", "ConfigError", "TestbedConfig", "from_dict", "load_config"]

PROFILES = ("llm-d", "gaie-v1", "vllm", "litellm", "sglang", "openai", "anthropic", "fifo", "headroom")


@dataclass
class BandConfig:
    """Capacity of one priority band (0 = use the default)."""

    priority: int
    max_requests: int = 0
    max_bytes: int = 0


@dataclass
class FlowControlConfig:
    """llm-d / GAIE EPP flow control (llm-d-router apix/config/v1alpha1)."""

    objectives: dict[str, int] = field(
        default_factory=lambda: {"interactive": 100, "standard": 0, "batch": -1}
    )
    fairness: str = "global-strict"  # or "round-robin"
    ttl_s: float | None = None  # None = profile default: llm-d 60 s, gaie-v1 none
    no_endpoint_ttl_s: float | None = None  # queue budget while the pool is empty (None = ttl_s)
    sweep_interval_s: float = 1.0  # expiry sweep period: sheds can be up to 1 s late, as in the EPP
    band_max_requests: int = 5000  # llm-d-router v0.10 default (#2123)
    band_max_bytes: int = 1_000_000_000  # llm-d-router default per band
    max_requests: int = 0  # global, 0 = unlimited
    max_bytes: int = 0  # global, 0 = unlimited
    bands: list[BandConfig] = field(default_factory=list)
    queue_depth_threshold: float = 5.0  # utilization-detector default
    kv_cache_util_threshold: float = 0.8  # utilization-detector default
    saturation_ceiling: float = 1.0  # static-usage-limit-policy default
    enable_eviction: bool = False  # evict in-flight priority<0 requests for blocked higher bands
    # llm-d demand-driven revocation (PR #2249): a request of priority >= 0 blocked by a saturated pool revokes
    # running priority<0 requests, as many as the blocked demand not already covered by pending revocations
    revocation: bool = False
    revocation_timeout_s: float = 5.0  # a revocation not confirmed by its replica's next step within this: timed_out
    # llm-d's metrics keep at most this many fairness_id label values; later tenants count under "other"
    # (llm-d-router docs/metrics.md: 1,000)
    fairness_id_cap: int = 1000
    enabled: bool = True  # the flowControl feature gate; false = legacy admission (no EPP queue)


@dataclass
class VllmConfig:
    """vLLM engine admission (PR #49445)."""

    max_num_queued_reqs: int | None = None  # waiting + running per replica; None = unbounded
    # prompt tokens of the replica's requests still before their first token (waiting or in prefill); an arrival
    # finding them at or over this is refused (vllm/v1/engine/async_llm.py, 503 as the request limit); None = off
    max_num_queued_tokens: int | None = None
    # --enable-per-request-metrics (vLLM 0.32): a ``metrics`` object in each answer (in a stream: the usage chunk)
    per_request_metrics: bool = True


@dataclass
class SglangConfig:
    """SGLang scheduler admission."""

    max_queued_requests: int | None = None  # per replica waiting queue
    waiting_timeout_s: float | None = None  # SGLANG_REQ_WAITING_TIMEOUT
    priority_scheduling: bool = True  # --enable-priority-scheduling
    low_priority_values_first: bool = False  # --schedule-low-priority-values-first
    priority_scheduling_preemption_threshold: int = 10  # preempt a running request if the gap is > this
    disable_priority_preemption: bool = False  # --disable-priority-preemption


@dataclass
class OpenAIConfig:
    """OpenAI-like hosted API behaviour."""

    rpm_limit: int | None = None  # per API key (Authorization header); None = no limit
    tpm_limit: int = 2_000_000  # advertised only in x-ratelimit-*-tokens
    flex_saturation: float = 1.0  # flex gets 429 resource_unavailable at or above this pool saturation


@dataclass
class AnthropicConfig:
    """Anthropic-like hosted API behaviour."""

    overload_saturation: float = 1.5  # 529 overloaded_error at or above this pool saturation
    rpm_limit: int | None = None  # per API key (x-api-key / Authorization); None = no limit


@dataclass
class HeadroomConfig:
    """Multi-tier KV headroom ("Beyond Binary Priorities"): H_p = M * h_max * exp(-lambda * p)."""

    h_max: float = 0.2  # paper README
    lam: float = 0.5  # decay per tier (assumed; the paper's value is not readable here)
    tiers: dict[str, int] = field(
        default_factory=lambda: {"interactive": 0, "standard": 1, "batch": 2}
    )
    default_tier: int = 1


@dataclass
class ToolCallConfig:
    """Answers that call a tool: only to requests that offer ``tools`` (chat and Anthropic messages)."""

    probability: float = 0.0  # share of such requests answered with a tool call instead of text


@dataclass
class FaultSpec:
    """One scheduled fault: kind in replica_down, slow_replica, stream_cut, error, fail_open."""

    kind: str
    at_s: float = 0.0
    duration_s: float | None = None  # None = until the end
    replica: int | None = None  # replica_down/slow_replica: None = all replicas
    factor: float = 1.0  # slow_replica: step time multiplier
    after_tokens: int = 1  # stream_cut: close the connection after k tokens
    rate: float = 1.0  # stream_cut/error: fraction of arrivals affected
    status: int = 503  # error: injected HTTP status
    retry_after_s: float | None = None  # error: send `Retry-After: <seconds>` (wire value, not scaled by speed)
    name: str | None = None  # recorded in the ledger's `fault`; default = kind


# fail_open: llm-d's FailOpen recipe with an unreachable scheduler: the gateway skips flow control, so the
# request reaches a model server untouched (no band, no queue, the default priority) and the EPP counts nothing
FAULT_KINDS = ("replica_down", "slow_replica", "stream_cut", "error", "fail_open")


@dataclass
class TestbedConfig:
    """Everything the testbed server needs."""

    profile: str = "llm-d"
    preset: str = "h100-llama8b"
    replicas: int = 2
    speed: float = 1.0  # time scale: 10 = every simulated duration runs 10x faster
    models: list[str] = field(default_factory=lambda: ["testbed"])
    default_max_tokens: int = 128
    max_body_bytes: int = 8 * 1024 * 1024
    warmup_s: float = 0.0
    seed: int = 0
    # engine overrides (None = the preset's value)
    max_num_seqs: int | None = None
    kv_capacity_tokens: int | None = None
    max_num_batched_tokens: int | None = None
    block_tokens: int | None = None
    prefix_cache: bool = True
    flow_control: FlowControlConfig = field(default_factory=FlowControlConfig)
    vllm: VllmConfig = field(default_factory=VllmConfig)
    sglang: SglangConfig = field(default_factory=SglangConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    anthropic: AnthropicConfig = field(default_factory=AnthropicConfig)
    headroom: HeadroomConfig = field(default_factory=HeadroomConfig)
    faults: list[FaultSpec] = field(default_factory=list)
    tool_calls: ToolCallConfig = field(default_factory=ToolCallConfig)
    request_log: str | None = None  # a JSONL file: every request body as received (for tests and debugging)

    __test__ = False  # not a pytest class

    def validate(self) -> TestbedConfig:
        """Check cross-field rules; returns self."""
        from rushhour.testbed.presets import get_preset

        if self.profile not in PROFILES:
            raise ConfigError(f"profile: unknown {self.profile!r} (known: {', '.join(PROFILES)})")
        try:
            get_preset(self.preset)  # a built-in name, or a calibrated preset's file (read and checked)
        except ValueError as exc:
            raise ConfigError(f"preset: {exc}") from None
        if self.replicas < 1:
            raise ConfigError("replicas: must be >= 1")
        if self.speed <= 0:
            raise ConfigError("speed: must be > 0")
        if not self.models:
            raise ConfigError("models: needs at least one model name")
        if self.flow_control.fairness not in ("global-strict", "round-robin"):
            raise ConfigError("flow_control.fairness: must be 'global-strict' or 'round-robin'")
        if self.flow_control.revocation and self.flow_control.enable_eviction:
            raise ConfigError("flow_control.revocation: choose revocation or enable_eviction, not both "
                              "(both kill priority<0 requests for a blocked band)")
        if self.flow_control.revocation_timeout_s <= 0:
            raise ConfigError("flow_control.revocation_timeout_s: must be > 0")
        if not 0.0 <= self.tool_calls.probability <= 1.0:
            raise ConfigError("tool_calls.probability: must be between 0 and 1")
        for i, f in enumerate(self.faults):
            if f.kind not in FAULT_KINDS:
                raise ConfigError(f"faults[{i}].kind: unknown {f.kind!r} (known: {', '.join(FAULT_KINDS)})")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (for GET /admin/config)."""
        return dataclasses.asdict(self)


def load_config(path: str | Path | None = None, **overrides: Any) -> TestbedConfig:
    """Load a TestbedConfig from YAML (or defaults), apply non-None overrides, validate."""
    import yaml

    data: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
        if loaded is not None:
            if not isinstance(loaded, dict):
                raise ConfigError(f"{path}: top level must be a mapping")
            data = loaded
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        cfg: TestbedConfig = from_dict(TestbedConfig, data)
        return cfg.validate()
    except ConfigError as exc:
        where = f"{path}: " if path is not None else ""
        raise ConfigError(f"{where}{exc}") from None
