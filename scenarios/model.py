"""The scenario model: target, tiers, personas, phases, resilience, budget and SLOs.

Every workload parameter is a seeded distribution (``scenarios.distributions``). Defaults come from
``shared/reference/workloads.md`` (Azure 2023 conv, TraceLab, Copilot 2026) and say so.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from scenarios.distributions import Distribution, as_dist_input

PROFILES = ("llm-d", "gaie-v1", "vllm", "sglang", "openai", "anthropic", "smg", "fifo", "headroom", "testbed")
Profile = Literal["llm-d", "gaie-v1", "vllm", "sglang", "openai", "anthropic", "smg", "fifo", "headroom", "testbed"]
Dialect = Literal["openai-chat", "openai-completions", "anthropic-messages"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``"90s"``, ``"1.5m"``, ``"250ms"`` or ``"1h"``."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '90s', '2m'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match.group(1)) * _UNIT_S[match.group(2)]
    raise ValueError(f"not a duration: {value!r} (use seconds, or '90s', '2m', '250ms', '1h')")


Seconds = Annotated[float, BeforeValidator(parse_duration)]


def _spec(data: dict[str, Any]) -> Any:
    """A distribution default written as YAML would write it (validated like user input)."""
    return data
Dist = Annotated[Distribution, BeforeValidator(as_dist_input)]


def check_url(value: str) -> str:
    """A target URL: 'testbed' or http(s)://host… without credentials (they would end up in records)."""
    if value != "testbed" and not re.match(r"^https?://", value):
        raise ValueError("url must be 'testbed' or start with http:// or https://")
    if re.match(r"^https?://[^/]*@", value):
        raise ValueError("a URL must not carry a user or password: give keys as a tier credential 'env:VAR'")
    return value.rstrip("/")


class Strict(BaseModel):
    """Base for scenario sections: unknown keys are errors (typos must not pass silently)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True)


# --------------------------------------------------------------------------- SLOs


class LatencySLO(Strict):
    """Percentile ceilings in milliseconds."""

    p50: float | None = Field(default=None, gt=0)
    p90: float | None = Field(default=None, gt=0)
    p95: float | None = Field(default=None, gt=0)
    p99: float | None = Field(default=None, gt=0)
    max: float | None = Field(default=None, gt=0)

    def items(self) -> list[tuple[str, float]]:
        return [(k, v) for k, v in self.model_dump().items() if v is not None]


class SLO(Strict):
    """What a tier is promised; ``rushhour gate`` judges a run against it."""

    ttft_ms: LatencySLO | None = None
    ttft_from_intended_ms: LatencySLO | None = None
    tpot_ms: LatencySLO | None = None
    e2e_ms: LatencySLO | None = None
    max_drop_rate: float | None = Field(default=None, ge=0, le=1)
    max_drop_rate_by_class: dict[str, float] = Field(default_factory=dict)
    max_429_share: float | None = Field(default=None, ge=0, le=1)
    max_503_share: float | None = Field(default=None, ge=0, le=1)
    min_goodput: float | None = Field(default=None, ge=0, le=1, description="share served within SLO")
    floor_share: float | None = Field(
        default=None, ge=0, le=1, description="minimum share of goodput during saturation"
    )
    max_deadline_miss_rate: float | None = Field(default=None, ge=0, le=1)
    judge: Literal["point", "bound"] = Field(
        default="point", description="judge on the point estimate, or on the 95% confidence bound"
    )

    def is_empty(self) -> bool:
        return self == SLO(judge=self.judge)


# --------------------------------------------------------------------------- target and tiers


class TestbedOptions(Strict):
    """Options for the embedded testbed when ``target.url`` is ``testbed``."""

    preset: str = "tiny"
    replicas: int = Field(default=1, ge=1)
    speed: float = Field(default=1.0, gt=0, description="time scale of the simulated GPUs")
    config: dict[str, Any] = Field(default_factory=dict, description="extra testbed config keys")
    faults: list[dict[str, Any]] = Field(default_factory=list)


class MetricsOptions(Strict):
    url: str | None = Field(default="auto", description="Prometheus endpoint; auto = <target>/metrics")
    interval_s: Seconds = 1.0
    timeout_s: Seconds = 0.5


class Target(Strict):
    url: str = Field(default="testbed", description="base URL, or 'testbed' for the embedded testbed")
    profile: Profile = "llm-d"
    model: str = "testbed"
    dialect: Dialect = "openai-chat"
    stream: bool = True
    testbed: TestbedOptions = Field(default_factory=TestbedOptions)
    metrics: MetricsOptions | None = Field(default_factory=MetricsOptions)

    @property
    def is_testbed(self) -> bool:
        return self.url == "testbed"

    @field_validator("url")
    @classmethod
    def _url_shape(cls, value: str) -> str:
        return check_url(value)


class RetryPolicy(Strict):
    on: list[str] = Field(
        default_factory=lambda: ["429", "503", "529"],
        description="statuses, or 'timeout', 'transport', 'in_band'",
    )
    max_attempts: int = Field(default=1, ge=1, description="1 = no retries")
    backoff: Literal["retry_after", "fixed", "exponential"] = "retry_after"
    base_s: Seconds = 0.5
    max_backoff_s: Seconds = 30.0
    max_total_s: Seconds = 120.0
    honour_retry_after: bool = True


class Tier(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    priority: int = Field(default=0, description="higher = more urgent (rushhour's polarity; mapped per stack)")
    objective: str | None = Field(default=None, description="llm-d InferenceObjective name; default: tier name")
    credential: str | None = Field(default=None, description="env:VAR holding this tier's API key")
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] = Field(default_factory=dict)
    service_tier: str | None = None
    tenants: int | list[str] = Field(default=1, description="count, or explicit fairness ids")
    slo: SLO = Field(default_factory=SLO)
    retries: RetryPolicy | None = Field(
        default=None, description="this tier's retry policy (default: resilience.retries)"
    )

    @field_validator("credential")
    @classmethod
    def _env_only(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("env:"):
            raise ValueError("credentials are named, never written: use 'env:VARIABLE'")
        return value

    @property
    def tenant_ids(self) -> list[str]:
        if isinstance(self.tenants, list):
            return self.tenants
        return [f"{self.name}-t{i}" for i in range(max(1, self.tenants))]


# --------------------------------------------------------------------------- personas


class Arrival(Strict):
    """An open-loop arrival process (rate scaled by the current phase)."""

    process: Literal["poisson", "gamma", "constant"] = "poisson"
    rate: float = Field(gt=0, description="arrivals per second at phase scale 1")
    shape: float = Field(default=1.0, gt=0, description="gamma shape (<1 is bursty; 1 is Poisson)")


class ChatPersona(Strict):
    """Latency-sensitive chat: sessions arrive open-loop; turns are closed-loop with think time."""

    kind: Literal["chat"]
    name: str
    tier: str
    arrival: Arrival
    max_concurrent_sessions: int = Field(default=200, ge=1, description="slots; overflow is recorded not_sent")
    turns: Dist = Field(
        default_factory=lambda: _spec({"dist": "geometric", "mean": 1.0, "offset": 1}),
        description="turns per session: 1 + geometric, mean 2 (LMSYS ~2; 73 % multi-turn)",
    )
    think_time_s: Dist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "median": 30.0, "sigma": 1.0, "max": 600.0})
    )
    system_prompt_tokens: int = Field(default=512, ge=0)
    prompt_tokens: Dist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "mu": 6.63, "sigma": 0.99, "min": 2, "max": 16000})
    )
    output_tokens: Dist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "mu": 5.02, "sigma": 0.86, "min": 1, "max": 1000})
    )


class AgentSwarmPersona(Strict):
    """Bursty agents: fan-out of parallel calls, quiet during tools, back with a longer prefix."""

    kind: Literal["agent_swarm"]
    name: str
    tier: str
    agents: int = Field(default=10, ge=1, description="concurrent agents in the swarm")
    start: Literal["population", "arrivals", "stampede"] = "population"
    task_rate: float | None = Field(default=None, gt=0, description="tasks/s when start = arrivals")
    ramp_s: Seconds = Field(default=5.0, description="population start spread (stampede = all at t0)")
    steps: Dist = Field(
        default_factory=lambda: _spec({"dist": "geometric", "mean": 6.8, "offset": 1, "max": 100}),
        description="LLM steps per task (Copilot 7.83 calls/turn)",
    )
    fanout: Dist = Field(
        default_factory=lambda: _spec({
            "dist": "mixture",
            "parts": [
                {"weight": 0.85, "dist": 1},
                {"weight": 0.15, "dist": {"dist": "poisson", "mean": 1.0, "offset": 1, "max": 5}},
            ],
        }),
        description="parallel calls per step (Copilot 1.12/batch; Anthropic 3-5 subagents)",
    )
    tool_time_s: Dist = Field(
        default_factory=lambda: _spec({
            "dist": "mixture",
            "parts": [
                {"weight": 0.96, "dist": {"dist": "lognormal", "median": 0.3, "sigma": 2.5, "max": 60}},
                {"weight": 0.04, "dist": {"dist": "uniform", "low": 60, "high": 600}},
            ],
        }),
        description="TraceLab: p50 0.3 s, p90 13.6 s, 4 % over a minute",
    )
    shared_context_tokens: int = Field(default=12000, ge=0, description="swarm-wide system prompt + tools")
    task_context_tokens: Dist = Field(default_factory=lambda: _spec({"dist": "uniform", "low": 2000, "high": 10000}))
    append_tokens: Dist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "median": 875, "sigma": 1.2, "max": 20000}),
        description="tool result appended per step (TraceLab median 875)",
    )
    output_tokens: Dist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "median": 214, "sigma": 1.0, "min": 16, "max": 4000})
    )
    context_cap_tokens: int = Field(default=128000, gt=0)
    compact_to: float = Field(default=0.2, gt=0, le=1)
    deadline_s: Seconds | None = Field(default=None, description="task deadline; default factor x ideal")
    deadline_factor: float = Field(default=3.0, gt=0)
    idle_between_tasks_s: Dist = Field(default_factory=lambda: _spec({"dist": "constant", "value": 0.0}))
    after_failure_s: Dist = Field(
        default_factory=lambda: _spec({"dist": "exponential", "mean": 2.0, "max": 30.0}),
        description="pause after a failed task before the next (harnesses back off; assumed)",
    )


class TraceReplayPersona(Strict):
    """Replays a real trace: timestamps become intended send times, token counts become prompts."""

    kind: Literal["trace_replay"]
    name: str
    tier: str
    trace: str
    format: Literal["azure", "mooncake", "auto"] = "auto"
    time_scale: float = Field(default=1.0, gt=0, description="2 = replay twice as fast")
    start_s: Seconds = 0.0
    limit: int | None = Field(default=None, ge=1)
    max_in_flight: int = Field(default=500, ge=1)
    max_prompt_tokens: int = Field(default=32000, gt=0)
    max_output_tokens: int = Field(default=2000, gt=0)


Persona = Annotated[ChatPersona | AgentSwarmPersona | TraceReplayPersona, Field(discriminator="kind")]


# --------------------------------------------------------------------------- phases, resilience, budget


class Phase(Strict):
    name: str
    duration: Seconds
    rate_scale: float = Field(default=1.0, ge=0)
    agents_scale: float | None = Field(default=None, ge=0, description="agent population scale (default: rate_scale)")


class Timeouts(Strict):
    connect_s: Seconds = 5.0
    ttft_s: Seconds = Field(default=120.0, description="deadline for the first token")
    total_s: Seconds = Field(default=600.0, description="deadline for the whole response")


class Breaker(Strict):
    fail_max: int = Field(default=5, ge=1)
    reset_timeout_s: Seconds = 10.0


class Route(Strict):
    name: str
    url: str
    profile: Profile = "llm-d"
    model: str | None = None
    dialect: Dialect | None = None
    credential: str | None = None
    testbed: TestbedOptions | None = None

    @field_validator("url")
    @classmethod
    def _url_shape(cls, value: str) -> str:
        return check_url(value)


class Resilience(Strict):
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retries: RetryPolicy = Field(default_factory=RetryPolicy)
    fallback: list[Route] = Field(default_factory=list, description="ordered routes after the primary")
    breaker: Breaker | None = None


class Budget(Strict):
    max_requests: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    price_per_mtok_in: float | None = None
    price_per_mtok_out: float | None = None
    per_tier: dict[str, Budget] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cost_needs_prices(self) -> Budget:
        if self.max_cost_usd is not None and self.price_per_mtok_in is None and self.price_per_mtok_out is None:
            raise ValueError("max_cost_usd needs a price table: price_per_mtok_in and/or price_per_mtok_out")
        return self


class Calibration(Strict):
    """Idle probes at the start of a run: the unloaded TTFT that 'inflation' is measured against."""

    probes: int = Field(default=5, ge=0)
    prompt_tokens: list[int] = Field(default_factory=lambda: [256, 2048])


# --------------------------------------------------------------------------- scenario


class Scenario(Strict):
    name: str
    description: str = ""
    seed: int = 1
    target: Target = Field(default_factory=Target)
    tiers: list[Tier] = Field(min_length=1)
    personas: list[Persona] = Field(min_length=1)
    phases: list[Phase] = Field(default_factory=lambda: [Phase(name="steady", duration=60.0)])
    resilience: Resilience = Field(default_factory=Resilience)
    budget: Budget | None = None
    calibration: Calibration = Field(default_factory=Calibration)
    record_token_times: bool = False
    drain_s: Seconds = Field(default=10.0, description="after the last phase, wait this long for in-flight")

    @property
    def duration_s(self) -> float:
        return sum(p.duration for p in self.phases)

    def tier(self, name: str) -> Tier:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise KeyError(name)

    @model_validator(mode="after")
    def _cross_references(self) -> Scenario:
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique: {names}")
        persona_names = [p.name for p in self.personas]
        if len(set(persona_names)) != len(persona_names):
            raise ValueError(f"persona names must be unique: {persona_names}")
        for persona in self.personas:
            if persona.tier not in names:
                raise ValueError(f"persona {persona.name!r} uses unknown tier {persona.tier!r} (tiers: {names})")
            if isinstance(persona, AgentSwarmPersona) and persona.start == "arrivals" and not persona.task_rate:
                raise ValueError(f"persona {persona.name!r}: start 'arrivals' needs task_rate")
        if self.budget:
            for tier_name in self.budget.per_tier:
                if tier_name not in names:
                    raise ValueError(f"budget.per_tier names unknown tier {tier_name!r}")
        return self


Budget.model_rebuild()
