"""``summary.json``: the audit's versioned result, read by ``gate``, the reports and other tools.

Keys are stable within a schema version: add fields freely, never rename or change a meaning
without bumping ``SUMMARY_SCHEMA``. ``docs/summary.schema.json`` is generated from these models.
Times are seconds from the run's anchor unless a name says ``_ms``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SUMMARY_SCHEMA = "rushhour.summary/2"

# The outcome taxonomy (DESIGN.md). Order matters for tables and charts.
OUTCOME_CLASSES = (
    "served",
    "queue_full",
    "queue_timeout",
    "shed",
    "preempted",
    "rate_limited",
    "overloaded",
    "failed",
    "timeout",
    "transport",
    "cancelled",
    "abandoned",
    "unfinished",
    "unclassified",
    "not_sent",
)
# Sent and not served, whatever the cause (docs/audit.md "Accounting"): the headline "not served".
# ``not_sent`` never left the generator: it is the generator's fault and judged by validity instead.
UNSERVED_CLASSES = tuple(c for c in OUTCOME_CLASSES if c not in ("served", "not_sent"))
# Reasons rushhour's own client writes on an attempt it refused before sending (loadgen/engine/attempts.py)
CLIENT_REASONS = ("breaker_open", "budget")
# Turned away by the stack's own policy: the breakdown of the headline.
POLICY_DROP_CLASSES = ("queue_full", "queue_timeout", "shed", "preempted", "overloaded", "rate_limited")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Rate(_Model):
    """A proportion k/n with its 95 % Wilson interval."""

    k: int
    n: int
    value: float | None
    low: float | None
    high: float | None


class Percentiles(_Model):
    """Latency percentiles in milliseconds with 95 % bootstrap intervals for p50/p90/p99.

    With right-censored waits (requests the run ended before their first token) the percentiles are
    Kaplan–Meier estimates; a percentile the censoring hides is only a lower bound (``lower_bound``).
    """

    n: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    ci: dict[str, tuple[float, float]] = Field(default_factory=dict)
    censored: int = Field(default=0, description="observations that only say 'waited at least this long' "
                          "(included in n)")
    lower_bound: list[str] = Field(
        default_factory=list, description="percentile names (p50, p90, p95, p99, max, mean) whose value is only "
        "a lower bound: too many waits were censored to estimate them")


class Latency(_Model):
    ttft_ms: Percentiles
    ttft_from_intended_ms: Percentiles
    tpot_ms: Percentiles
    itl_max_ms: Percentiles
    e2e_ms: Percentiles
    schedule_lag_ms: Percentiles
    itl_ms: Percentiles | None = Field(
        default=None, description="pooled inter-token latency: every gap between consecutive stream events of every "
        "served request (from the records' per-token times); null when the records hold none (the scenario's "
        "record_token_times was off, or a simulated run): not measured, never estimated from TPOT")


class Inflation(_Model):
    """TTFT over the unloaded calibration of the same prompt size (1.0 = no inflation)."""

    idle_ttft_ms: float | None
    p50_x: float | None
    p99_x: float | None
    source: str = ""
    ci: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="'p50' / 'p99' -> 95 % bootstrap interval of the inflation ratio")


class TenantSummary(_Model):
    tenant: str
    requests: int
    served: int
    unserved: int = Field(description="sent and not served (every class except served and not_sent)")
    drop_rate: Rate
    goodput_per_s: float
    ttft_p99_ms: float | None


class Fairness(_Model):
    jain_index: float | None
    tenants: list[TenantSummary]


class Floor(_Model):
    """Share of goodput during saturation against a configured minimum."""

    share: float | None
    minimum: float | None
    passed: bool | None
    rate: Rate | None = Field(
        default=None, description="the share as k/n (goodput requests in saturation) with its Wilson interval"
    )


class PersonaSummary(_Model):
    """One persona's requests inside a tier (added in audit v1; absent lists mean 'not computed')."""

    persona: str
    requests: int
    served: int
    unserved: int = Field(description="sent and not served (every class except served and not_sent)")
    drop_rate: Rate
    goodput_per_s: float
    ttft_p99_ms: float | None
    abandoned: int = Field(default=0, description="requests the persona's users gave up on (no first token in time)")
    abandon_rate: Rate | None = Field(default=None, description="abandoned / sent: judged by max_abandon_rate")
    patience: bool | None = Field(default=None, description="the run's scenario gave the persona's users a patience "
                                  "(patience_s); null: the scenario does not say. Without one and with nothing "
                                  "abandoned, max_abandon_rate is vacuous")


class TaskStats(_Model):
    """Agent tasks or chat sessions of one tier."""

    n: int
    completed: int
    failed: int
    deadline_missed: int
    cancelled: int
    completion_rate: Rate
    deadline_miss_rate: Rate
    makespan_s: Percentiles
    makespan_inflation_p50_x: float | None = None
    failed_by_class: dict[str, int] = Field(default_factory=dict)
    with_deadline: int | None = Field(default=None, description="judged (not cancelled) tasks or sessions that had a "
                                      "deadline; 0: max_deadline_miss_rate is vacuous (null: an older summary)")


class SaturationSlice(_Model):
    """The tier's headline figures restricted to saturation windows."""

    requests: int
    by_class: dict[str, int]
    drop_rate: Rate = Field(description="not served / sent, within saturation windows")
    ttft_ms: Percentiles
    ttft_from_intended_ms: Percentiles


class PhaseSlice(_Model):
    """The tier's requests whose first intended send fell in one phase (same censoring and intervals)."""

    phase: str
    measured: bool = Field(description="false: a warm-up/cool-down (or measure: false) phase, left out of the "
                           "tier's figures and its whole-run SLO verdicts")
    requests: int
    unserved: int
    drop_rate: Rate = Field(description="not served / sent, within the phase")
    ttft_ms: Percentiles


class Excluded(_Model):
    """What the measurement window left out of a tier's figures: requests sent in unmeasured phases."""

    requests: int
    attempts: int
    by_class: dict[str, int]
    attempts_by_class: dict[str, int]


class TierRoute(_Model):
    """One tier on one route: who served it, why traffic came here, and what it cost."""

    route: str
    requests: int = Field(description="logical requests of the tier that ended on this route")
    served: int = Field(description="of which served")
    served_share: float | None = Field(description="served here / served on any route")
    attempts: int
    moved_here: int = Field(description="attempts that switched to this route from another")
    moved_because: dict[str, int]
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    ttft_p50_cost_ms: float | None = Field(description="TTFT p50 here minus the tier's p50 on the primary")
    ttft_p99_cost_ms: float | None
    breaker_open_s: float


class TokenFidelity(_Model):
    """Served attempts only: how far the load was from the scenario's token counts, as the server counted."""

    prompt_n: int = Field(description="served attempts with both an intended and a server-reported prompt count")
    prompt_exact_basis: bool = Field(
        description="every intended count came from the scenario's tokenizer (else some or all are byte estimates)"
    )
    prompt_diff_median: float | None = Field(description="median of reported − intended prompt tokens")
    prompt_diff_p99: float | None = Field(description="99th percentile of |reported − intended| prompt tokens")
    prompt_share_exact: float | None = Field(description="share of attempts whose reported count equals the intended")
    output_n: int = Field(description="served attempts with a reported output count and the max_tokens asked")
    output_pinned_share: float | None = Field(description="share of those whose body pinned the output length")
    output_share_equal: float | None = Field(description="share whose output tokens equal max_tokens")
    output_ratio_median: float | None = Field(description="median of output tokens / max_tokens")


class AgentFigures(_Model):
    """Agents on the wire (logical requests, retries folded; answers = served requests)."""

    requests_with_tools: int = Field(description="logical requests whose body offered the model function tools")
    served_with_tools: int = Field(description="of those, served")
    tool_call_answers: int = Field(description="served answers that called a tool, a call cut by max_tokens "
                                   "included (the next step carries the first whole call; a cut one, as text)")
    tool_calls_by_name: dict[str, int] = Field(default_factory=dict, description="those answers per tool called")
    subagent_spawns: int = Field(description="calls that spawned sub-agents (distinct parent ids)")
    subagent_requests: int = Field(description="logical requests sent by sub-agents")


class PairedEffect(_Model):
    """The tier against its equal-priority twins on one paired latency (both of a pair served)."""

    n: int = Field(description="pairs where both got a first token")
    tier_p50_ms: float | None = None
    control_p50_ms: float | None = None
    change: float | None = Field(
        default=None, description="median over pairs of tier / twin - 1 (-0.61 = the typical pair 61 % lower)"
    )
    lower: int = Field(default=0, description="pairs where the tier's request was faster than its twin")
    higher: int = Field(default=0, description="pairs where the twin was faster")
    ties: int = 0
    p_value: float | None = Field(default=None, description="exact two-sided sign test (ties left out)")
    significant: bool = False


class DropEffect(_Model):
    """The tier against its twins on 'not served' (every pair whose both halves were sent)."""

    n: int
    tier_unserved: int = 0
    control_unserved: int = 0
    only_tier: int = Field(default=0, description="pairs where only the tier's request was not served")
    only_control: int = Field(default=0, description="pairs where only the twin was not served")
    difference: float | None = Field(default=None, description="tier rate - control rate (fractions; x100 = pts)")
    p_value: float | None = Field(default=None, description="exact McNemar test on the discordant pairs")
    significant: bool = False


class PriorityEffect(_Model):
    """Did priority do anything? The tier's requests against equal-priority twins sent at the same moment."""

    pairs: int = Field(description="sampled requests whose twin was sent (both halves sent)")
    control: str = Field(description="what the twins carried instead of the tier's priority")
    alpha: float = 0.05
    ttft: PairedEffect = Field(description="TTFT from send")
    wait: PairedEffect = Field(description="queue wait: first token from the intended send")
    drops: DropEffect
    effect: bool = Field(description="any of the three differs significantly (p < alpha)")
    message: str


class TierSummary(_Model):
    name: str
    priority: int
    attempts: int
    requests: int  # logical requests (retries and fallbacks folded)
    by_class: dict[str, int]  # logical requests by their final class
    attempts_by_class: dict[str, int]
    by_status: dict[str, int]  # raw HTTP status of attempts ("0" = no response)
    by_reason: dict[str, int]  # raw reason header / error code of attempts the server answered
    client_reasons: dict[str, int] = Field(
        default_factory=dict, description="attempts rushhour's own client refused before sending (CLIENT_REASONS: "
        "breaker_open, budget): not reasons given by the server")
    status_by_class: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="attempts' raw HTTP status within each class, e.g. queue_full -> {429: 27}"
    )
    unserved: int = Field(description="logical requests sent and not served, whatever the class")
    drop_rate: Rate = Field(description="not served: unserved / sent (every class except not_sent)")
    policy_drop_rate: Rate = Field(description="turned away by the stack's policy (POLICY_DROP_CLASSES) / sent")
    drop_rate_by_class: dict[str, Rate] = Field(description="each unserved class / sent")
    share_429: Rate
    share_503: Rate
    goodput: Rate  # served within the tier's latency SLO
    goodput_per_s: float
    output_tokens_per_s: float | None = Field(
        default=None, description="output tokens of the tier's served attempts (as the server reported them) per "
        "second of the measured window; null when no served attempt reported its tokens")
    latency: Latency
    inflation: Inflation
    saturation: SaturationSlice | None
    retry_amplification: float  # attempts per logical request
    extra_attempts_in_saturation: int
    routes: dict[str, int]  # logical requests by the route that ended them
    fairness: Fairness
    starvation_max_gap_s: float | None
    floor: Floor
    tasks: TaskStats | None
    sessions: TaskStats | None
    preempted_after_first_token: int
    preempted_in_progress: int = Field(
        default=0, description="attempts killed after admission (class preempted: llm-d's revocation or "
        "eviction, SGLang's abort by a higher priority), streamed or not; judged by slo.max_preempted_in_progress")
    personas: list[PersonaSummary] = Field(default_factory=list, description="the tier's requests per persona")
    route_detail: list[TierRoute] = Field(default_factory=list, description="the tier per route (fallbacks)")
    priority_effect: PriorityEffect | None = Field(
        default=None, description="the priority control (scenario `control`): the tier against equal-priority "
        "twins of its own requests; the twins count in no other figure")
    ttft_cdf_ms: dict[str, list[float]] = Field(
        default_factory=dict,
        description="'from_send' / 'from_intended' -> TTFT at quantiles 0.00, 0.01, …, 1.00 (101 points)",
    )
    tokens: TokenFidelity | None = Field(
        default=None, description="prompt tokens reported vs intended, output served vs asked (served attempts)"
    )
    agents: AgentFigures | None = Field(
        default=None, description="tools offered, tool calls answered, sub-agent spawns (null: the tier had none)")
    phases: list[PhaseSlice] = Field(default_factory=list, description="the tier per phase (scenario order)")
    excluded: Excluded | None = Field(default=None, description="requests left out of the figures above "
                                      "(sent in unmeasured phases); null when every phase is measured")


class Window(_Model):
    start_s: float
    end_s: float
    source: Literal["outcomes", "metrics", "both"]
    detail: str = ""


class TierSeries(_Model):
    offered: list[int]
    served: list[int]
    unserved: dict[str, list[int]] = Field(description="attempts not served per bucket, per unserved class")
    ttft_p50_ms: list[float | None]
    ttft_p99_ms: list[float | None]


class Timeline(_Model):
    bucket_s: float
    t: list[float]  # bucket start, seconds from anchor
    tiers: dict[str, TierSeries]
    server: dict[str, dict[str, list[float | None]]] = Field(
        default_factory=dict, description="metric name -> label (e.g. priority) -> values per bucket"
    )
    breaker: list[dict[str, Any]] = Field(default_factory=list, description="breaker state changes")


class Finding(_Model):
    kind: str  # inversion | starvation | floor | preempted_in_progress | fallback_hid_outage | crosscheck | …
    severity: Literal["info", "warning", "error"]
    tier: str | None
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class Verdict(_Model):
    tier: str
    check: str  # e.g. ttft_ms.p99, max_drop_rate, floor_share
    threshold: float
    observed: float | None
    bound: float | None  # the confidence bound used when judge = bound
    judge: Literal["point", "bound"]
    passed: bool
    message: str
    inconclusive: bool = Field(default=False, description="too few samples (or a censored percentile below "
                               "the limit) to judge: not a pass; the gate exits 2")
    vacuous: bool = Field(default=False, description="the check judged nothing in this run (floor_share with no "
                          "saturation window, a deadline-miss rate with no deadline, an abandon rate with no "
                          "patience): not a pass (passed is false) and not a fail; a tier whose checks are all "
                          "vacuous is NOT JUDGED (its `judged` check is inconclusive: the gate exits 2)")


class Validity(_Model):
    valid: bool
    reasons: list[str]
    loop_lag_p99_ms: float | None
    cpu_max_percent: float | None
    not_sent: int
    schedule_lag_p99_ms: float | None
    skipped_lines: int
    truncated_shards: int
    loop_lag_sustained_s: float = Field(default=0.0, description="the longest run of busy seconds whose loop "
                                        "lag passed the limit (any load process), in seconds")
    lagging_seconds: int = Field(default=0, description="busy health seconds whose loop lag passed the limit")
    delayed_requests: int = Field(default=0, description="first attempts sent later than the schedule-lag "
                                  "limit after their intended time")
    thresholds: dict[str, float] = Field(
        default_factory=dict, description="the limits the generator was checked against (audit.validity)"
    )
    lost_workers: list[str] = Field(default_factory=list, description="shards (host-pid) of load processes that "
                                    "died mid-run: a worker_start and no worker_stop")
    clock_offset_uncertainty_ms: float | None = Field(
        default=0.0, description="how far another host's shard may sit from the run's clock: 0 when every "
        "shard was written on the anchor's host; else the largest half round trip of a worker's measured offset "
        "to the master; None when a remote shard has no measured offset (then only NTP bounds it)")
    remote_shards: int = Field(default=0, description="shards aligned through the wall clock (written on "
                               "another host than the run's anchor)")
    warnings: list[str] = Field(default_factory=list, description="generator trouble that moved no recorded time "
                                "beyond the tolerances (sustained loop lag, CPU): the run stays valid")
    cause: str | None = Field(default=None, description="which load process lagged, the host's load average, the "
                              "generator's CPU share, and what to change (set on generator trouble)")
    remedies: list[str] = Field(default_factory=list, description="what to change, most likely first")
    lagging_process: str | None = Field(default=None, description="the load process that lagged most (role, pid)")
    load_avg_max: float | None = Field(default=None, description="the host's highest 1-minute load average")
    generator_cpu_mean_percent: float | None = Field(default=None, description="the lagging process's mean CPU, "
                                                     "percent of one core")
    embedded_testbed: bool = Field(default=False, description="the run's own testbed shared the generator's cores")
    timing_judged_by: str = Field(default="symptom", description="harm: the records say how first tokens were "
                                  "timed, so loop lag and CPU only warn; symptom: older records, they void the run")
    first_tokens_moved: int = Field(default=0, description="first tokens whose time may be late by more than "
                                    "the tolerance (audit.harm)")


class RouteSummary(_Model):
    route: str
    attempts: int
    served: int
    by_class: dict[str, int]
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    switch_reasons: dict[str, int]  # why traffic moved to this route
    breaker_open_s: float
    breaker_half_open_s: float = Field(
        default=0.0, description="seconds half-open (one probe allowed, the rest refused)"
    )
    moved_because: dict[str, int] = Field(
        default_factory=dict,
        description="attempts that moved here, by cause: timeout, 429, 503, connection, stream_cut, "
        "'breaker_open (<what opened it>)', …",
    )
    down_s: float = Field(
        default=0.0, description="seconds (1 s buckets) in which this route got attempts and served none of them"
    )


class WaitPart(_Model):
    """One part of a tier's wait (intended send → first token), over its served attempts that reported it."""

    part: str = Field(description="client | gateway | engine_queue | prefill | decode (whole answers) | rest")
    reported: int = Field(description="served attempts with this part reported")
    not_reported: int = Field(description="served attempts without it (never counted as zero)")
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    sum_ms: float | None = None
    share: float | None = Field(default=None, description="this part's sum / the same attempts' total wait")


class TierWaits(_Model):
    """Where one tier waited, from the servers' own timing (audit/waits.py)."""

    tier: str
    phase: str | None = Field(default=None, description="the phase its attempts' intended sends fell in "
                              "(waits_by_phase); None: the run's measured phases (waits)")
    served: int
    total_p50_ms: float | None = Field(description="intended send → first token, p50 of served attempts")
    total_sum_ms: float
    parts: list[WaitPart]


class TimingCheck(_Model):
    """The run's sum of a per-request server time against the server's own histogram delta."""

    metric: str
    record_field: str
    client_count: int
    server_count: float
    client_sum_s: float
    server_sum_s: float
    unreported: int = Field(default=0, description="attempts the server may have timed that brought no timing "
                            "back (a 200 cut or unfinished, no answer): with them the counts may differ by up to "
                            "this many and the client's sum may only be smaller")
    matches: bool


class CrossCheck(_Model):
    tier: str  # a tier, tiers joined by '+' (one priority), or 'all' (a counter without a tier label)
    priority: int | None  # None: the counter is compared in total
    metric: str
    client: int
    server: float
    matches: bool


class Evidence(_Model):
    """A request not served, as the report's evidence table shows it."""

    tier: str
    request_id: str
    t_s: float
    status: int
    outcome: str
    reason: str | None
    retry_after_s: float | None
    error: str | None


class RunInfo(_Model):
    run_id: str
    scenario: str
    description: str = ""
    target: str
    testbed: str | None = Field(default=None, description="the embedded testbed the run targeted (its profile, "
                                "preset × replicas): `target` is then an ephemeral loopback port")
    profile: str
    model: str
    seed: int
    started_at: str  # ISO 8601, UTC
    duration_s: float
    processes: int
    mode: str = Field(default="real", description="real: load sent in real time; simulated: the scenario against "
                      "the testbed's model in virtual time (rushhour simulate)")
    calibration: dict[str, Any] | None = Field(
        default=None, description="a simulated run whose replicas rest on a calibrated preset (`rushhour calibrate`): "
        "its file and SHA-256, the server and engine it was fitted to, the date, and its held-out error (mape, "
        "pearson_r); null: a built-in preset's datasheet numbers")
    stop_reason: str = Field(default="", description="run.json's stop_reason: completed, interrupted, budget, …")
    interrupted: bool = Field(default=False, description="the run did not end on its schedule (stop_reason is "
                              "not 'completed'): Ctrl-C, a budget stop, a lost worker, an overrun")
    abort: dict[str, Any] | None = Field(default=None, description="run.json's early abort (stop_reason aborted_*): "
                                         "kind, message, at_s, tier, check, bound or signal; the gate fails")
    drain_s: float | None = Field(default=None, description="the scenario's drain after the last phase: requests "
                                  "still in flight after it end 'unfinished'")
    find_limit: dict[str, Any] | None = Field(
        default=None, description="a find-limit run's answer (run.json's find_limit, audit/limit.py): status, "
        "low/high scale and rate (the highest passing and lowest failing level), binding tier and check, the "
        "hold and its binding figure's interval, per tier its own bracket, and every step tried")
    until: dict[str, Any] | None = Field(
        default=None, description="`rushhour run --until`: the watched figure when it was known well enough "
        "(tier, check, value, low, high, n, half_width, precision, at_s; stop_reason precision_reached), or "
        "reached: false when the run's duration came first")
    versions: dict[str, str]
    command: str = ""
    phases: list[dict[str, Any]] = Field(default_factory=list)  # name, start_s, end_s, rate_scale


class Outage(_Model):
    """A span the target was down on purpose: a scheduled fault of the scenario (kept apart from saturation)."""

    start_s: float
    end_s: float
    name: str = ""
    kind: str = Field(description="the fault's kind, e.g. replica_down")
    route: str = Field(default="primary", description="the route whose testbed the fault was scheduled on")
    detail: str = ""


class TierSpend(_Model):
    """One tier's tokens (as the server reported them), its price, spend and budget use."""

    tier: str
    service_tier: str | None = None
    attempts_with_usage: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    price_per_mtok_in: float | None = None
    price_per_mtok_out: float | None = None
    price_from: str | None = Field(default=None, description="'tier' (budget.per_tier row) or 'run' (the run's "
                                   "price table, for tiers on the default service tier); null: no price")
    cost_usd: float | None = Field(default=None, description="tokens × price; null when the tier has no price")
    no_price: str | None = Field(default=None, description="why the tier has no price (never priced as another tier)")
    budget_limits: dict[str, float] = Field(default_factory=dict, description="the tier's own budget limits")
    budget_used: dict[str, float] = Field(default_factory=dict, description="what the budget guard counted "
                                          "(run.json budget_usage): requests, tokens, cost_usd")
    budget_share: dict[str, float] = Field(default_factory=dict, description="used / limit, per limit")


class Spend(_Model):
    """Tokens, spend and budget use: per tier and for the run (calibration probes and control twins left out)."""

    tiers: list[TierSpend] = Field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = Field(default=None, description="the priced tiers' spend; null when none is priced")
    unpriced_tiers: list[str] = Field(default_factory=list, description="tiers with tokens and no price")
    budget_limits: dict[str, float] = Field(default_factory=dict)
    budget_used: dict[str, float] = Field(default_factory=dict)
    budget_share: dict[str, float] = Field(default_factory=dict)
    budget_reached: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class Measurement(_Model):
    """The measurement window: which phases the tiers' figures and SLO verdicts are judged on."""

    measured_phases: list[str] = Field(default_factory=list)
    excluded_phases: list[str] = Field(default_factory=list)
    excluded_spans: list[list[float]] = Field(default_factory=list, description="[start_s, end_s] per excluded "
                                              "phase (by intended send)")
    measured_s: float | None = Field(default=None, description="seconds the measured phases last (per-second "
                                     "figures such as goodput_per_s divide by it); null when nothing is excluded")
    excluded_requests: int = Field(default=0, description="logical requests left out, every tier")
    excluded_attempts: int = 0


class Summary(_Model):
    schema_: str = Field(default=SUMMARY_SCHEMA, alias="schema")
    run: RunInfo
    validity: Validity
    tiers: list[TierSummary]  # most urgent first
    windows: list[Window]
    timeline: Timeline
    findings: list[Finding]
    verdicts: list[Verdict]
    passed: bool
    exit_code: int  # what `rushhour gate` returns: 0 pass, 1 fail, 2 invalid or inconclusive
    routes: list[RouteSummary]
    crosscheck: list[CrossCheck]
    evidence: list[Evidence]  # the first requests not served, per tier
    records: int
    tasks: int
    measurement: Measurement = Field(default_factory=Measurement)
    spend: Spend | None = Field(default=None, description="tokens, spend and budget use per tier")
    outages: list[Outage] = Field(default_factory=list, description="scheduled outages (faults that take every "
                                  "replica down); saturation windows leave them out")
    waits: list[TierWaits] = Field(default_factory=list, description="where each tier waited, from the servers' "
                                   "own timing (empty: the stack reported none)")
    waits_by_phase: list[TierWaits] = Field(default_factory=list, description="the same split per phase and tier, "
                                            "when the scenario has phases (each attempt in its intended send's)")
    timing_checks: list[TimingCheck] = Field(default_factory=list, description="per-request server times summed "
                                             "over the run against the server's histograms")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def tier(self, name: str) -> TierSummary:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise KeyError(name)
