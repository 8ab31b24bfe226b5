"""The scenario model: target, tiers, personas, phases, resilience, budget and SLOs.

Every workload parameter is a seeded distribution (``scenarios.distributions``). Defaults come from
``docs/sources.md`` (Azure 2023 conv, TraceLab, Copilot 2026) and say so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from rushhour import stacks
from rushhour.scenarios.distributions import (
    Constant,
    Distribution,
    Exponential,
    Gamma,
    Geometric,
    LogNormal,
    Mixture,
    Pareto,
    Poisson,
    Uniform,
    as_dist_input,
)
from rushhour.scenarios.references import Reference, reference_problems
from rushhour.scenarios.tools import BUILTIN_TOOLS, check_tools

PROFILES: tuple[str, ...] = stacks.NAMES  # every stack module's name and alias (stacks/registry.py)
if TYPE_CHECKING:
    Profile = str
else:  # a Literal built from the registry: the schema lists the names, and a typo is named as one
    Profile = Literal[PROFILES]
Dialect = Literal["openai-chat", "openai-completions", "anthropic-messages"]
CROSS_REFERENCE = "cross_reference"  # the error type of a name that refers to nothing (scenarios/references.py)

# Upper bounds (docs/scenarios.md, "Limits"): generous for any real test, small enough that a typo such
# as `rate: 1e9` or `tenants: 1e9` is refused at validation instead of hanging or flooding the run.
MAX_RATE = 10_000.0  # arrivals per second of one persona, at any phase's scale
MAX_TENANTS = 10_000  # per tier (each tenant is mapped on every route before the run starts)
MAX_TOKENS = 2_000_000  # per prompt or output: the largest context windows of 2026
MAX_AGENTS = 10_000  # agents of one swarm (one greenlet each, with its calls in flight)
MAX_SLOTS = 100_000  # concurrent sessions / requests in flight of one persona
MAX_FANOUT = 1_000  # parallel calls of one agent step
MAX_STEPS = 100_000  # steps of a task, turns of a session
MAX_DURATION_S = 7 * 86_400.0  # any duration, and all phases together: one week
MAX_REPLICAS = 256  # simulated replicas of the embedded testbed
MAX_SIM_REPLICAS = 16_384  # replicas of a stack in virtual time (`rushhour simulate/plan --replicas`)
MAX_SCALE = 1_000.0  # a workload multiplier (`--scale`, `--target-scale`), as a phase's rate_scale
MAX_LADDER = 100  # levels of a sweep or plan (`--steps`, a --scale or --replicas list): each is a run

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``"90s"``, ``"1.5m"``, ``"250ms"`` or ``"1h"``."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '90s', '2m'")
    seconds: float | None = None
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds is None:
        raise ValueError(f"not a duration: {value!r} (use seconds, or '90s', '2m', '250ms', '1h')")
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:
        raise ValueError(f"a duration is at most {MAX_DURATION_S:.0f} s (7 days), got {value!r}")
    return seconds


Seconds = Annotated[float, BeforeValidator(parse_duration)]


def _spec(data: dict[str, Any]) -> Any:
    """A distribution default written as YAML would write it (validated like user input)."""
    return data
Dist = Annotated[Distribution, BeforeValidator(as_dist_input)]


def _scale(dist: Any) -> float | None:
    """The size a distribution is centred on (its constant, upper end, mean or median); None if unknown."""
    if isinstance(dist, Mixture):
        scales = [_scale(part.dist) for part in dist.parts]
        return max((s for s in scales if s is not None), default=None)
    if isinstance(dist, Constant):
        return dist.value
    if isinstance(dist, Uniform):
        return dist.high
    if isinstance(dist, Exponential | Gamma):
        return dist.mean
    if isinstance(dist, Poisson | Geometric):
        return dist.mean + dist.offset
    if isinstance(dist, LogNormal):
        return dist.median if dist.median is not None else math.exp(min(dist.location, 700.0))
    if isinstance(dist, Pareto):
        return dist.xm
    return None  # empirical: the trace's own values


def bounded(limit: float, unit: str) -> Callable[[Any], Any]:
    """A validator: a count distribution whose scale or ``max`` is over ``limit`` is an error; an open
    tail is clipped at ``limit`` (a lognormal draw can otherwise be any size)."""

    def check(dist: Any) -> Any:
        for what, value in (("value", _scale(dist)), ("max", dist.max), ("min", dist.min)):
            if value is not None and not (math.isfinite(value) and value <= limit):
                raise ValueError(f"at most {limit:,.0f} {unit} (limit), got {what} {value:g}")
        return dist if dist.max is not None else dist.model_copy(update={"max": float(limit)})

    return check


TokenDist = Annotated[Distribution, BeforeValidator(as_dist_input), AfterValidator(bounded(MAX_TOKENS, "tokens"))]
StepDist = Annotated[Distribution, BeforeValidator(as_dist_input), AfterValidator(bounded(MAX_STEPS, "steps"))]
FanoutDist = Annotated[
    Distribution, BeforeValidator(as_dist_input), AfterValidator(bounded(MAX_FANOUT, "parallel calls"))
]


def check_url(value: str) -> str:
    """A target URL: 'testbed' or http(s)://host… without credentials (they would end up in records)."""
    if value != "testbed" and not re.match(r"^https?://", value):
        raise ValueError("url must be 'testbed' or start with http:// or https://")
    if re.match(r"^https?://[^/]*@", value):
        raise ValueError("a URL must not carry a user or password: give keys as a tier credential 'env:VAR'")
    if value != "testbed":
        parts = urlsplit(value)
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"the port of {value!r} is not a number from 1 to 65535") from None
        if port == 0:
            raise ValueError(f"the port of {value!r} is not a number from 1 to 65535")
        if not parts.hostname:
            raise ValueError(f"{value!r} has no host")
    return value.rstrip("/")


# Header and body names that carry credentials, and values shaped like one (an OpenAI/Anthropic key, a
# bearer or basic credential, a JWT, or a long random-looking token). Such a value written in a scenario
# would travel into run.json and every copy of the scenario: it is named as 'env:VAR' instead.
_SECRET_NAME = re.compile(r"(?i)auth|api[-_]?key|^key$|[-_]key$|token(?!s)|secret|passw|cookie|credential|signature")
_SECRET_VALUE = re.compile(
    r"(?i)^\s*(?:bearer|basic|token)\s+\S{8,}|sk-[A-Za-z0-9_\-]{8,}|eyJ[A-Za-z0-9_\-]{10,}\."
)
_TOKEN_LIKE = re.compile(r"^[A-Za-z0-9_\-+/=.~]{24,}$")


def looks_like_secret(value: str) -> bool:
    """A literal that is, or looks like, an API key or bearer credential."""
    if _SECRET_VALUE.search(value):
        return True
    return bool(_TOKEN_LIKE.match(value)) and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def check_no_literal_secrets(where: str, values: dict[str, Any]) -> None:
    """Refuse a literal credential among header or body values; ``env:VAR`` names one instead."""
    for name, value in values.items():
        if not isinstance(value, str) or value.startswith("env:"):
            continue
        if _SECRET_NAME.search(str(name)) or looks_like_secret(value):
            raise ValueError(
                f"{where} {name!r} holds a literal secret: write 'env:VARIABLE' and set the variable "
                "(a key in a scenario ends up in run.json and every copy of the file)"
            )


def env_only(value: str | None) -> str | None:
    """A credential is ``env:VAR``, never the key itself."""
    if value is not None and not re.match(r"^env:[A-Za-z_][A-Za-z0-9_]*$", value):
        raise ValueError("credentials are named, never written: use 'env:VARIABLE'")
    return value


class Strict(BaseModel):
    """Base for scenario sections: unknown keys are errors (typos must not pass silently)."""

    # .inf and .nan are numbers to YAML; none of ours means anything infinite. A rejected value is never echoed
    # in an error's text (a URL with a key in it, a literal credential): the loader quotes what it needs itself
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True, allow_inf_nan=False,
                              hide_input_in_errors=True)


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
    max_abandon_rate: float | None = Field(
        default=None, ge=0, le=1, description="per persona of the tier: requests its users gave up on / sent"
    )
    max_429_share: float | None = Field(default=None, ge=0, le=1)
    max_503_share: float | None = Field(default=None, ge=0, le=1)
    min_goodput: float | None = Field(default=None, ge=0, le=1, description="share served within SLO")
    floor_share: float | None = Field(
        default=None, ge=0, le=1, description="minimum share of goodput during saturation"
    )
    max_deadline_miss_rate: float | None = Field(default=None, ge=0, le=1)
    max_preempted_in_progress: int | None = Field(
        default=None, ge=0, le=1_000_000_000, description="most attempts of the tier killed after admission "
        "(class preempted: llm-d revocation or eviction, SGLang abort); 0 = no preemption of requests in progress")
    min_served: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="fewest requests of the tier that must be served when it "
        "sent any; unset: 1, checked (and shown) only when it fails (a tier that sent requests and had none served "
        "never passes)")
    allow_not_judged: bool = Field(
        default=False, description="let the gate pass when every check of this tier was vacuous (e.g. floor_share "
        "and no saturation): the tier is still shown NOT JUDGED; a starved tier still fails")
    judge: Literal["point", "bound"] = Field(
        default="point", description="judge on the point estimate, or on the 95% confidence bound"
    )
    phases: dict[str, SLO] = Field(
        default_factory=dict, description="checks judged on one phase's requests only, by phase name "
        "(e.g. peak: {ttft_ms: {p99: 2000}}); the judge is the tier's unless the phase sets its own")

    @model_validator(mode="after")
    def _phases_flat(self) -> SLO:
        for name, slo in self.phases.items():
            if slo.phases:
                raise ValueError(f"slo.phases.{name}: a phase's SLO cannot name phases again")
        return self

    def is_empty(self) -> bool:
        return self == SLO(judge=self.judge, allow_not_judged=self.allow_not_judged)


# --------------------------------------------------------------------------- target and tiers


class TestbedOptions(Strict):
    """Options for the embedded testbed when ``target.url`` is ``testbed``."""

    preset: str = Field(default="tiny", description="a built-in preset's name, or the .yaml file `rushhour "
                        "calibrate` wrote (a relative path is taken from the current folder)")
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    speed: float = Field(default=1.0, gt=0, description="time scale of the simulated GPUs")
    config: dict[str, Any] = Field(default_factory=dict, description="extra testbed config keys")
    faults: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("preset")
    @classmethod
    def _preset_file_absolute(cls, value: str) -> str:
        # a calibrated preset's file, named once: the testbed process and the simulator read the same file
        if value.lower().endswith((".yaml", ".yml")):
            return str(Path(value).expanduser().absolute())
        return value


class MetricsOptions(Strict):
    url: str | None = Field(default="auto", description="Prometheus endpoint: auto = <target> + the profile's "
                            "metrics path, '/path' = under the target, or a full http(s) URL; null = none")
    credential: str | None = Field(default=None, description="env:VAR holding a bearer token for the endpoint")
    interval_s: Seconds = 1.0
    timeout_s: Seconds = 0.5

    @field_validator("url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is None or value == "auto" or value.startswith("/"):
            return value
        return check_url(value)

    @field_validator("credential")
    @classmethod
    def _env_only(cls, value: str | None) -> str | None:
        return env_only(value)


class Target(Strict):
    url: str = Field(default="testbed", description="base URL, or 'testbed' for the embedded testbed")
    profile: Profile = "llm-d"
    model: str = Field(default="testbed", description="the model every request names; 'testbed' is the name the "
                       "embedded testbed serves (`rushhour serve` also serves its preset's model)")
    dialect: Dialect = "openai-chat"
    stream: bool = True
    testbed: TestbedOptions = Field(default_factory=TestbedOptions, description="the testbed `url: testbed` "
                                    "starts: default one 'tiny' replica (4 sequences, 4,096-token context), not "
                                    "the 2 x H100 of `rushhour serve`")
    metrics: MetricsOptions | None = Field(default_factory=MetricsOptions)
    tokenizer: str | None = Field(
        default=None,
        description="a local tokenizer.json or model folder: prompts of exact token counts (never downloaded)",
    )
    pin_output: bool | None = Field(
        default=None,
        description="ask for exactly max_tokens (min_tokens + ignore_eos); default: where the profile can; "
        "never on a request that offers tools",
    )

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
    max_attempts: int = Field(default=1, ge=1, le=100, description="1 = no retries")
    backoff: Literal["retry_after", "fixed", "exponential"] = "retry_after"
    base_s: Seconds = 0.5
    max_backoff_s: Seconds = 30.0
    max_total_s: Seconds = 120.0
    honour_retry_after: bool = True


class Abort(Strict):
    """Early abort (docs/scenarios.md#early-abort): stop a run that can no longer pass, and fail its gate."""

    hopeless_slo: bool = Field(default=False, description="stop when a tier's SLO is statistically hopeless: the "
                               "99 % lower bound of its figure so far already exceeds the limit")
    saturation: bool = Field(default=False, description="stop when the stack is over-saturated: requests in "
                             "flight grew in every one of the last `windows` windows, or the not-served share "
                             "climbed through them")
    window_s: Seconds = Field(default=5.0, ge=1.0, le=600.0, description="length of one saturation window")
    windows: int = Field(default=4, ge=2, le=100, description="consecutive windows the saturation signal must hold")
    min_samples: int = Field(default=20, ge=5, le=100_000, description="fewest finished requests of a tier before "
                             "its SLO may be called hopeless (percentiles need more: their bound's own minimum)")
    after_s: Seconds = Field(default=0.0, ge=0.0, description="look only after this many seconds of the schedule")

    @property
    def enabled(self) -> bool:
        return self.hopeless_slo or self.saturation


class FindLimit(Strict):
    """Find each tier's limit in one run (docs/find-limit.md): ramp the load, bisect, hold at the limit."""

    persona: str | None = Field(default=None, description="ramp this persona's load only; default: the whole "
                                "mix in proportion")
    start: float = Field(default=0.25, gt=0, le=1000, description="the first step's load, × the personas' rates")
    factor: float = Field(default=2.0, gt=1, le=10, description="the coarse ramp: each step's load × this")
    max_scale: float = Field(default=64.0, gt=0, le=1000, description="the highest load tried")
    step_s: Seconds = Field(default=15.0, ge=1.0, le=3600.0, description="a step's measurement window")
    settle_s: Seconds = Field(default=5.0, ge=0.0, le=600.0, description="after each change of load, requests "
                              "sent this long are not judged (the queue of the level before drains or builds)")
    lag_s: Seconds = Field(default=5.0, ge=0.0, le=600.0, description="after a window, the load stays while its "
                           "requests finish; requests sent then are not judged (queue build-up is credited to no step)")
    bisect: int = Field(default=3, ge=0, le=10, description="bisection steps between the last pass and first fail")
    precision: float = Field(default=0.05, gt=0, le=1, description="hold until the binding figure's 95 % interval "
                             "half-width is at most this share of its value")
    hold_s: Seconds = Field(default=60.0, ge=0.0, le=86_400.0, description="the hold's time cap")
    min_samples: int = Field(default=20, ge=5, le=100_000, description="finished requests a tier needs in a step "
                             "for a verdict (a thinner step is not a pass: fail closed)")

    @model_validator(mode="after")
    def _range(self) -> FindLimit:
        if self.max_scale < self.start:
            raise ValueError(f"max_scale {self.max_scale:g} is below start {self.start:g}")
        return self


class Control(Strict):
    """The priority control: twin a sample of a tier's requests with equal-priority copies (docs/audit.md)."""

    share: float = Field(gt=0, le=1, description="fraction of the tier's logical requests that get a twin")
    priority: int | None = Field(
        default=None, description="the twins' priority (rushhour's polarity) on stacks with a body priority; "
        "default: the midpoint of the scenario's tier priorities, rounded down")
    objective: str | None = Field(
        default=None, description="the twins' objective header on header stacks (llm-d, GAIE, SMG); default: "
        "none sent (the stack's default priority)")


class Tier(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    priority: int = Field(default=0, description="higher = more urgent (rushhour's polarity; mapped per stack)")
    objective: str | None = Field(default=None, description="llm-d InferenceObjective name; default: tier name")
    credential: str | None = Field(default=None, description="env:VAR holding this tier's API key")
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] = Field(default_factory=dict)
    service_tier: str | None = None
    tenants: int | list[str] = Field(default=1, description=f"count, or explicit fairness ids (at most {MAX_TENANTS})")
    slo: SLO = Field(default_factory=SLO)
    retries: RetryPolicy | None = Field(
        default=None, description="this tier's retry policy (default: resilience.retries)"
    )
    control: Control | None = Field(default=None, description="this tier's priority control (default: the "
                                    "scenario's `control`)")

    @field_validator("credential")
    @classmethod
    def _env_only(cls, value: str | None) -> str | None:
        return env_only(value)

    @field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, value: dict[str, str]) -> dict[str, str]:
        check_no_literal_secrets("header", value)
        for name, text in value.items():
            if text.startswith("env:") and not re.match(r"^env:[A-Za-z_][A-Za-z0-9_]*$", text):
                raise ValueError(f"header {name!r}: 'env:' must be followed by a variable name, got {text!r}")
        return value

    @field_validator("body")
    @classmethod
    def _no_secret_body(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_no_literal_secrets("body field", value)
        return value

    @field_validator("tenants")
    @classmethod
    def _tenant_limit(cls, value: int | list[str]) -> int | list[str]:
        count = len(value) if isinstance(value, list) else value
        if not 1 <= count <= MAX_TENANTS:
            raise ValueError(f"between 1 and {MAX_TENANTS:,} tenants (limit), got {count:,}")
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
    rate: float = Field(gt=0, le=MAX_RATE, description="arrivals per second at phase scale 1")
    shape: float = Field(default=1.0, gt=0, description="gamma shape (<1 is bursty; 1 is Poisson)")


class Dataset(Strict):
    """Prompts from a file of conversations (ShareGPT ``conversations`` or OpenAI ``messages``; JSONL or Parquet)."""

    path: str = Field(description="next to the scenario, among the shipped datasets, or under --allow-path")
    format: Literal["auto", "sharegpt", "openai"] = "auto"
    output_tokens: Literal["dataset", "persona"] = Field(
        default="dataset", description="max_tokens from the dataset's own answer, or the persona's output_tokens"
    )
    max_turns: int | None = Field(default=None, ge=1, le=MAX_STEPS, description="turns sent per conversation")
    limit: int | None = Field(default=None, ge=1, description="read at most this many conversations")


class ChatPersona(Strict):
    """Latency-sensitive chat: sessions arrive open-loop; turns are closed-loop with think time."""

    kind: Literal["chat"]
    # where a scenario's raw data holds its arrival rate (the phase-span check); None: no rate of its own
    RATE_PATH: ClassVar[tuple[str, ...] | None] = ("arrival", "rate")
    SWARM: ClassVar[bool] = False  # a population of agents that phases scale (agents_scale)
    name: str
    tier: str
    stream: bool | None = Field(default=None, description="stream the answers (SSE); unset: the target's "
                                "`stream` (a batch persona may take whole answers while chat streams)")
    arrival: Arrival
    max_concurrent_sessions: int = Field(
        default=200, ge=1, le=MAX_SLOTS, description="slots; overflow is recorded not_sent"
    )
    concurrency: int | None = Field(
        default=None, ge=1, le=MAX_SLOTS, description="closed loop ('N in flight', as AIPerf's and GuideLLM's "
        "--concurrency): this many sessions at all times, each user starting the next as soon as one ends (its "
        "turns, think time between them); the arrival rate is then unused")
    turns: StepDist = Field(
        default_factory=lambda: _spec({"dist": "geometric", "mean": 1.0, "offset": 1}),
        description="turns per session: 1 + geometric, mean 2 (LMSYS ~2; 73 % multi-turn)",
    )
    think_time_s: Dist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "median": 30.0, "sigma": 1.0, "max": 600.0})
    )
    system_prompt_tokens: int = Field(default=512, ge=0, le=MAX_TOKENS)
    prompt_tokens: TokenDist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "mu": 6.63, "sigma": 0.99, "min": 2, "max": 16000})
    )
    output_tokens: TokenDist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "mu": 5.02, "sigma": 0.86, "min": 1, "max": 1000})
    )
    patience_s: Dist | None = Field(
        default=None,
        description="seconds a user waits for a first token before giving up (closes the connection); "
        "none = never (only resilience.timeouts.ttft_s)",
    )
    on_abandon: Literal["leave", "retry"] = Field(
        default="leave", description="after giving up: leave the session, or ask again (up to abandon_retries)"
    )
    abandon_retries: int = Field(default=1, ge=0, le=100, description="re-asks per turn when on_abandon = retry")
    dataset: Dataset | None = Field(default=None, description="each session replays a sampled conversation's turns")

    def scaled(self, factor: float) -> ChatPersona:
        """The same persona carrying ``factor`` times its load: the arrival rate and the session slots."""
        update: dict[str, Any] = {
            "arrival": self.arrival.model_copy(update={"rate": self.arrival.rate * factor}),
            "max_concurrent_sessions": max(1, round(self.max_concurrent_sessions * factor))}
        if self.concurrency is not None:  # closed loop: the load is the users in flight
            update["concurrency"] = max(1, round(self.concurrency * factor))
        return self.model_copy(update=update)

    def has_arrival_rate(self) -> bool:
        """Whether its load is an open-loop arrival rate (the live load scale reaches it): not a closed loop."""
        return self.concurrency is None

    def peak_sockets(self, scale: float) -> float:
        """Sockets it may hold at once over all processes: one per session slot (closed loop: per user)."""
        return float(self.concurrency if self.concurrency is not None else self.max_concurrent_sessions)


class Subagents(Strict):
    """A call that spawns its own small swarm: sub-agents sharing a brief, the parent waiting for them all."""

    probability: float = Field(ge=0, le=1, description="share of a task's steps (not its last) whose call spawns")
    fan_out: FanoutDist = Field(default_factory=lambda: _spec({"dist": "constant", "value": 3}),
                                description="sub-agents per spawn (Anthropic: 3-5 subagents)")
    steps: StepDist = Field(default_factory=lambda: _spec({"dist": "constant", "value": 3}),
                            description="LLM steps of each sub-agent (assumed)")
    prefix_tokens: int = Field(
        default=2000, ge=0, le=MAX_TOKENS, description="the spawn's brief, shared by its sub-agents"
    )


class AgentSwarmPersona(Strict):
    """Bursty agents: fan-out of parallel calls, quiet during tools, back with a longer prefix."""

    kind: Literal["agent_swarm"]
    RATE_PATH: ClassVar[tuple[str, ...] | None] = ("task_rate",)
    SWARM: ClassVar[bool] = True
    name: str
    tier: str
    stream: bool | None = Field(default=None, description="stream the answers (SSE); unset: the target's "
                                "`stream` (a batch persona may take whole answers while chat streams)")
    agents: int = Field(default=10, ge=1, le=MAX_AGENTS, description="concurrent agents in the swarm")
    start: Literal["population", "arrivals", "stampede"] = "population"
    task_rate: float | None = Field(default=None, gt=0, le=MAX_RATE, description="tasks/s when start = arrivals")
    ramp_s: Seconds = Field(default=5.0, description="population start spread (stampede = all at t0)")
    steps: StepDist = Field(
        default_factory=lambda: _spec({"dist": "geometric", "mean": 6.8, "offset": 1, "max": 100}),
        description="LLM steps per task (Copilot 7.83 calls/turn)",
    )
    fanout: FanoutDist = Field(
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
    shared_context_tokens: int = Field(
        default=12000, ge=0, le=MAX_TOKENS, description="swarm-wide system prompt + tools"
    )
    task_context_tokens: TokenDist = Field(
        default_factory=lambda: _spec({"dist": "uniform", "low": 2000, "high": 10000})
    )
    append_tokens: TokenDist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "median": 875, "sigma": 1.2, "max": 20000}),
        description="tool result appended per step (TraceLab median 875)",
    )
    output_tokens: TokenDist = Field(
        default_factory=lambda: _spec({"dist": "lognormal", "median": 214, "sigma": 1.0, "min": 16, "max": 4000})
    )
    context_cap_tokens: int = Field(default=128000, gt=0, le=MAX_TOKENS)
    compact_to: float = Field(default=0.2, gt=0, le=1)
    deadline_s: Seconds | None = Field(default=None, description="task deadline; default factor x ideal")
    deadline_factor: float = Field(default=3.0, gt=0)
    idle_between_tasks_s: Dist = Field(default_factory=lambda: _spec({"dist": "constant", "value": 0.0}))
    after_failure_s: Dist = Field(
        default_factory=lambda: _spec({"dist": "exponential", "mean": 2.0, "max": 30.0}),
        description="pause after a failed task before the next (harnesses back off; assumed)",
    )
    tools: bool | list[dict[str, Any]] = Field(
        default=False,
        description="function tools sent with every call: true = a built-in coding set, or OpenAI function tools",
    )
    subagents: Subagents | None = Field(default=None, description="calls that spawn a small swarm of sub-agents")
    dataset: Dataset | None = Field(
        default=None, description="each task's context is a sampled conversation's first turn"
    )

    @field_validator("tools")
    @classmethod
    def _tools_shape(cls, value: bool | list[dict[str, Any]]) -> bool | list[dict[str, Any]]:
        return value if isinstance(value, bool) else check_tools(value)

    @model_validator(mode="after")
    def _arrivals_need_a_rate(self) -> AgentSwarmPersona:
        if self.start == "arrivals" and not self.task_rate:
            raise ValueError("start 'arrivals' needs task_rate (tasks per second)")
        return self

    @property
    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """The tools the swarm's requests carry (None: none)."""
        if self.tools is True:
            return BUILTIN_TOOLS
        return self.tools or None

    def scaled(self, factor: float) -> AgentSwarmPersona:
        """The same swarm carrying ``factor`` times its load: the agents, and the task rate where it has one."""
        update: dict[str, Any] = {"agents": max(1, round(self.agents * factor))}
        if self.task_rate is not None:
            update["task_rate"] = self.task_rate * factor
        return self.model_copy(update=update)

    def has_arrival_rate(self) -> bool:
        """Whether its load is an open-loop arrival rate: tasks that arrive, not a standing population."""
        return self.start == "arrivals"

    def peak_sockets(self, scale: float) -> float:
        """Sockets it may hold at once over all processes: its agents (at the largest phase ``scale`` unless they
        arrive) times their widest fan-out."""
        agents = self.agents if self.start == "arrivals" else self.agents * max(1.0, scale)
        return agents * max(1.0, self.fanout.ceiling())


class TraceReplayPersona(Strict):
    """Replays a real trace: timestamps become intended send times, token counts become prompts."""

    kind: Literal["trace_replay"]
    RATE_PATH: ClassVar[tuple[str, ...] | None] = None
    SWARM: ClassVar[bool] = False
    name: str
    tier: str
    stream: bool | None = Field(default=None, description="stream the answers (SSE); unset: the target's "
                                "`stream` (a batch persona may take whole answers while chat streams)")
    trace: str
    format: Literal["azure", "mooncake", "auto"] = "auto"
    time_scale: float = Field(default=1.0, gt=0, description="2 = replay twice as fast")
    start_s: Seconds = 0.0
    limit: int | None = Field(default=None, ge=1)
    max_in_flight: int = Field(default=500, ge=1, le=MAX_SLOTS)
    max_prompt_tokens: int = Field(default=32000, gt=0, le=MAX_TOKENS)
    max_output_tokens: int = Field(default=2000, gt=0, le=MAX_TOKENS)

    def scaled(self, factor: float) -> TraceReplayPersona:
        """The same replay carrying ``factor`` times its load: faster, with as many more requests in flight."""
        return self.model_copy(update={"time_scale": self.time_scale * factor,
                                       "max_in_flight": max(1, round(self.max_in_flight * factor))})

    def has_arrival_rate(self) -> bool:
        """Whether its load is an open-loop arrival rate: no, the trace's own times (time_scale)."""
        return False

    def peak_sockets(self, scale: float) -> float:
        """Sockets it may hold at once over all processes: its in-flight cap."""
        return float(self.max_in_flight)


class AgentTracePersona(Strict):
    """Replays recorded agent sessions: each call after its parent's answer and the tool time, sub-agents in
    parallel, the context carried from call to call (a Weka agent trace: ``loadgen/agent_traces.py``)."""

    kind: Literal["agent_trace"]
    RATE_PATH: ClassVar[tuple[str, ...] | None] = None
    SWARM: ClassVar[bool] = False
    name: str
    tier: str = Field(description="the tier of the main agents' calls (and of sub-agents not in subagent_tiers)")
    stream: bool | None = Field(default=None, description="stream the answers (SSE); unset: the target's "
                                "`stream` (a batch persona may take whole answers while chat streams)")
    trace: str = Field(description="one session per line; next to the scenario, or under --allow-path")
    format: Literal["weka", "auto"] = "auto"
    time_scale: float = Field(default=1.0, gt=0, description="2 = tool gaps and session starts twice as fast")
    session_gap_s: Seconds = Field(default=1.0, description="trace seconds between one session's start and the "
                                   "next (divided by time_scale; 0: every session at once)")
    sessions: int | None = Field(default=None, ge=1, le=MAX_SLOTS,
                                 description="replay at most this many sessions (the trace's first)")
    max_gap_s: Seconds | None = Field(default=None, description="no one wait (tool gap) longer than this, after "
                                      "time_scale; none = the trace's own")
    max_sessions_in_flight: int = Field(default=100, ge=1, le=MAX_SLOTS,
                                        description="sessions at once; a session over it is recorded not_sent")
    max_fan_out: int = Field(default=16, ge=1, le=1000, description="sub-agents of one call that run at once; "
                             "more start as the first finish")
    max_prompt_tokens: int = Field(default=32000, gt=0, le=MAX_TOKENS)
    max_output_tokens: int = Field(default=2000, gt=0, le=MAX_TOKENS)
    subagent_tiers: dict[str, str] = Field(default_factory=dict, description="a sub-agent type (the trace's "
                                           "subagent_type) → the tier of its calls")

    def tier_of(self, agent_type: str) -> str:
        """The tier of an agent's calls: its type's, else the persona's."""
        return self.subagent_tiers.get(agent_type, self.tier)

    def scaled(self, factor: float) -> AgentTracePersona:
        """The same replay carrying ``factor`` times its load: faster, with as many more sessions at once."""
        return self.model_copy(update={"time_scale": self.time_scale * factor,
                                       "max_sessions_in_flight": max(1, round(self.max_sessions_in_flight * factor))})

    def has_arrival_rate(self) -> bool:
        """Whether its load is an open-loop arrival rate: no, the trace's sessions (time_scale)."""
        return False

    def peak_sockets(self, scale: float) -> float:
        """Sockets it may hold at once over all processes: its sessions, each with its widest fan-out."""
        return float(self.max_sessions_in_flight * self.max_fan_out)


# The persona kinds: adding a kind is its model class and one entry in this union (scenarios/kinds.py is the
# registry read off it; each higher layer's per-kind table is checked against it).
Persona = Annotated[ChatPersona | AgentSwarmPersona | TraceReplayPersona | AgentTracePersona,
                    Field(discriminator="kind")]


def kind_of(model: type[BaseModel]) -> str:
    """A persona model's ``kind`` tag: the one value of its discriminator."""
    return str(get_args(model.model_fields["kind"].annotation)[0])


PERSONA_MODELS: dict[str, Any] = {kind_of(m): m for m in get_args(get_args(Persona)[0])}


# --------------------------------------------------------------------------- phases, resilience, budget


class Phase(Strict):
    name: str
    duration: Seconds
    rate_scale: float = Field(default=1.0, ge=0, le=1000)
    agents_scale: float | None = Field(
        default=None, ge=0, le=1000, description="agent population scale (default: rate_scale)"
    )
    measure: bool | None = Field(
        default=None, description="judge this phase's requests (latency figures and SLOs); default: "
        "yes, except a phase named warm-up or cool-down (warmup, warm_up, cooldown, … any case)")

    @property
    def measured(self) -> bool:
        """Whether the audit judges this phase's requests (``measure``, else by the phase's name)."""
        if self.measure is not None:
            return self.measure
        return not is_warm_or_cool(self.name)


def is_warm_or_cool(name: str) -> bool:
    """A phase name that means warm-up or cool-down: 'warm-up', 'Warmup', 'cool_down', … (default excluded)."""
    return re.sub(r"[^a-z]", "", name.lower()) in ("warmup", "cooldown")


class Timeouts(Strict):
    connect_s: Seconds = 5.0
    ttft_s: Seconds = Field(default=120.0, description="deadline for the first token")
    total_s: Seconds = Field(default=600.0, description="deadline for the whole response")
    keepalive_s: Seconds = Field(
        default=4.0, description="drop a pooled connection idle this long (keep it below the server's keep-alive)"
    )


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

    @field_validator("credential")
    @classmethod
    def _env_only(cls, value: str | None) -> str | None:
        return env_only(value)


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

    probes: int = Field(default=5, ge=0, le=1000)
    prompt_tokens: list[Annotated[int, Field(ge=1, le=MAX_TOKENS)]] = Field(default_factory=lambda: [256, 2048])


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
    control: Control | None = Field(default=None, description="twin a sample of every tier's requests with "
                                    "equal-priority copies: did priority do anything?")
    drain_s: Seconds = Field(default=10.0, description="after the last phase, wait this long for in-flight")
    abort: Abort | None = Field(default=None, description="stop early when an SLO is hopeless or the stack "
                                "over-saturated (the gate then fails); `rushhour run --abort` overrides it")
    find_limit: FindLimit | None = Field(default=None, description="find each tier's limit in one run "
                                         "(`rushhour run --find-limit`): the ramp, the bisection and the hold")

    @property
    def duration_s(self) -> float:
        return sum(p.duration for p in self.phases)

    def tier(self, name: str) -> Tier:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise KeyError(name)

    def stream_for(self, persona: str) -> bool:
        """Does this persona's request stream? Its own ``stream``, else the target's (probes: the target's)."""
        own = next((p.stream for p in self.personas if p.name == persona), None)
        return self.target.stream if own is None else own

    def control_for(self, tier: str) -> Control | None:
        """The priority control that applies to ``tier``: its own, else the scenario's, else none."""
        own = self.tier(tier).control
        return own if own is not None else self.control

    def neutral_priority(self, control: Control) -> int:
        """The twins' priority (rushhour's polarity): the control's, else the tiers' midpoint rounded down."""
        if control.priority is not None:
            return control.priority
        values = [t.priority for t in self.tiers]
        return (min(values) + max(values)) // 2

    @model_validator(mode="after")
    def _cross_references(self) -> Scenario:
        data = self.model_dump()
        problems = reference_problems(data) + span_problems(data)
        if problems:  # the loader reports these located, from the YAML, beside every field error
            text = "; ".join(f"{'.'.join(map(str, p.loc))}: {p.message}" + (f" ({p.hint})" if p.hint else "")
                             for p in problems)
            raise PydanticCustomError(CROSS_REFERENCE, "{text}", {"text": text})
        return self


def _number(value: Any) -> float | None:
    """A finite number from plain data, else None (a wrong type is a field error of its own)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _seconds(value: Any) -> float | None:
    try:
        return parse_duration(value)
    except ValueError:
        return None


def span_problems(data: Any) -> list[Reference]:
    """Limits that span fields — the busiest phase's rate, a scaled swarm, all phases together — and that some
    phase is measured, on a scenario's plain data (the YAML's, or a model's dump): located, beside field errors."""
    if not isinstance(data, Mapping):
        return []
    raw_phases = data.get("phases")
    phases = [dict(p) for p in raw_phases if isinstance(p, Mapping)] if isinstance(raw_phases, list) else []
    if raw_phases is None:
        phases = [{"name": "steady", "duration": 60.0}]
    out: list[Reference] = []
    total = sum(d for d in (_seconds(p.get("duration")) for p in phases) if d is not None)
    if total > MAX_DURATION_S:
        out.append(Reference(("phases",), f"phases last {total:.0f} s in all; the limit is {MAX_DURATION_S:.0f} s "
                                          "(7 days)"))
    flags = [p.get("measure") for p in phases]
    measured = [f if isinstance(f, bool) else not is_warm_or_cool(str(p.get("name", ""))) for f, p in
                zip(flags, phases, strict=True)]
    if phases and not any(measured) and False in flags:
        out.append(Reference(("phases",), "every phase has measure: false: nothing would be judged",
                             "measure at least one"))
    personas = data.get("personas")
    for i, persona in enumerate(personas if isinstance(personas, list) else []):
        if isinstance(persona, Mapping):
            out += _persona_spans(i, persona, phases)
    return out


def _persona_spans(i: int, persona: Mapping[str, Any], phases: list[dict[str, Any]]) -> list[Reference]:
    """A persona's rate at each phase's scale, and a swarm's size at each phase's scale (the first phase over)."""
    model, name = PERSONA_MODELS.get(str(persona.get("kind"))), persona.get("name")
    if model is None or (model.RATE_PATH is None and not model.SWARM):
        return []
    where: tuple[str | int, ...] = ("personas", i, *(model.RATE_PATH or ()))
    value: Any = persona if model.RATE_PATH else None
    for key in model.RATE_PATH or ():
        value = value.get(key) if isinstance(value, Mapping) else None
    base = _number(value)
    out: list[Reference] = []
    for phase in phases:
        scale = _number(phase.get("rate_scale", 1.0))
        if base is not None and scale is not None and base * scale > MAX_RATE:
            out.append(Reference(where, f"persona {name!r} in phase {phase.get('name')!r}: rate {base:g}/s × "
                                        f"scale {scale:g} is over the limit of {MAX_RATE:,.0f} arrivals/s"))
            break
    agents = _number(persona.get("agents", 10))
    for phase in phases if model.SWARM and agents is not None else []:
        scale = _number(phase.get("agents_scale")) if phase.get("agents_scale") is not None else \
            _number(phase.get("rate_scale", 1.0))
        if scale is not None and agents is not None and agents * scale > MAX_AGENTS:
            out.append(Reference(("personas", i, "agents"), f"persona {name!r} in phase {phase.get('name')!r}: "
                                 f"{agents * scale:,.0f} agents is over the limit of {MAX_AGENTS:,}"))
            break
    return out


Budget.model_rebuild()
SLO.model_rebuild()
