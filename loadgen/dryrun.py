"""Dry run: how many requests and tokens a scenario will send, per persona and tier, and what it costs.

Pure arithmetic on the scenario's distributions (``mean_estimate()``); it opens no socket, starts no
process and reads only the trace and dataset files the personas name. Estimates, not promises:

- chat: sessions = Σ_phases arrival.rate · rate_scale · duration; requests = sessions · E[turns].
  Each turn resends the conversation (system prompt + earlier turns and answers), so prompt tokens per
  session = E[T]·system + p·E[T(T+1)/2] + o·E[T(T-1)/2] (second moment of turns from a fixed-seed
  sample). ``max_concurrent_sessions`` is ignored (overflow would be ``not_sent``). With a ``dataset``
  every conversation is equally likely: its turns, its texts' sizes (bytes / 4) and its answers' sizes.
- agent swarm: tasks = Σ_phases agents · agents_scale · duration / E[task time] (or
  task_rate · rate_scale · duration when ``start: arrivals``); E[task time] = E[steps] · (assumed call
  time + E[tool time]) + E[idle]; the call time is ``assumed_ttft_s + E[output]·assumed_tpot_s``;
  requests = tasks · E[steps] · E[fanout]; a step's prompt = shared + task context +
  k·(append + output) for step k, capped at ``context_cap_tokens``. ``subagents`` add
  tasks · (E[steps] − 1) · probability · E[fan_out] · E[sub-agent steps] calls, each with the shared
  context + the brief + its own history (their time is not in E[task time]: more tasks, a safe side).
- trace replay: the rows whose scaled timestamps fall inside the run, up to ``limit``, with token
  counts clipped to the persona's maxima.
Retries and fallbacks are not counted (they add attempts; ``Resilience.retries`` bounds them).
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rushhour.loadgen.agent_traces import read_agent_trace
from rushhour.loadgen.datasets import load_dataset
from rushhour.loadgen.prompts import count as count_tokens
from rushhour.scenarios.distributions import resolve_trace_path
from rushhour.scenarios.kinds import every_kind
from rushhour.scenarios.model import (
    AgentSwarmPersona,
    AgentTracePersona,
    Budget,
    ChatPersona,
    Scenario,
    TraceReplayPersona,
)

if TYPE_CHECKING:
    from rich.table import Table

Prices = dict[str, tuple[float, float]]  # tier -> USD per million (prompt, output) tokens


@dataclass(slots=True)
class PersonaPlan:
    persona: str
    tier: str
    kind: str
    units: float  # sessions, tasks or trace rows
    unit_name: str
    requests: float
    prompt_tokens: float
    output_tokens: float
    cost_usd: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> float:
        return self.prompt_tokens + self.output_tokens


@dataclass(slots=True)
class TierPlan:
    tier: str
    requests: float = 0.0
    prompt_tokens: float = 0.0
    output_tokens: float = 0.0
    cost_usd: float | None = None

    @property
    def tokens(self) -> float:
        return self.prompt_tokens + self.output_tokens


@dataclass(slots=True)
class DryRunPlan:
    scenario: str
    duration_s: float
    personas: list[PersonaPlan]
    tiers: dict[str, TierPlan]
    priced: bool
    budget_warnings: list[str] = field(default_factory=list)

    @property
    def requests(self) -> float:
        return sum(t.requests for t in self.tiers.values())

    @property
    def tokens(self) -> float:
        return sum(t.tokens for t in self.tiers.values())

    @property
    def cost_usd(self) -> float | None:
        if not self.priced:
            return None
        return sum(t.cost_usd or 0.0 for t in self.tiers.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "duration_s": self.duration_s,
            "requests": round(self.requests, 1),
            "tokens": round(self.tokens),
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 4),
            "tiers": {
                name: {
                    "requests": round(t.requests, 1),
                    "prompt_tokens": round(t.prompt_tokens),
                    "output_tokens": round(t.output_tokens),
                    "cost_usd": None if t.cost_usd is None else round(t.cost_usd, 4),
                }
                for name, t in self.tiers.items()
            },
            "personas": [
                {
                    "persona": p.persona,
                    "tier": p.tier,
                    "kind": p.kind,
                    p.unit_name: round(p.units, 1),
                    "requests": round(p.requests, 1),
                    "prompt_tokens": round(p.prompt_tokens),
                    "output_tokens": round(p.output_tokens),
                    "cost_usd": None if p.cost_usd is None else round(p.cost_usd, 4),
                    "notes": p.notes,
                }
                for p in self.personas
            ],
            "budget_warnings": self.budget_warnings,
        }


# --------------------------------------------------------------------------- prices


def prices_from_budget(budget: Budget | None, tiers: list[str]) -> Prices | None:
    """Per-tier prices from the scenario's budget (a tier's own prices override the run's)."""
    if budget is None:
        return None
    base_in, base_out = budget.price_per_mtok_in, budget.price_per_mtok_out
    prices: Prices = {}
    for tier in tiers:
        own = budget.per_tier.get(tier)
        p_in = own.price_per_mtok_in if own and own.price_per_mtok_in is not None else base_in
        p_out = own.price_per_mtok_out if own and own.price_per_mtok_out is not None else base_out
        if p_in is not None or p_out is not None:
            prices[tier] = (p_in or 0.0, p_out or 0.0)
    return prices or None


# --------------------------------------------------------------------------- per persona


def _moments(dist: Any, n: int = 4000) -> tuple[float, float]:
    """(E[X], E[X²]) of a distribution's clipped samples, with a fixed seed (deterministic)."""
    rng = random.Random(20240611)
    draws = [max(0.0, float(round(dist.sample(rng)))) for _ in range(n)]
    return sum(draws) / n, sum(d * d for d in draws) / n


def _dataset_session(p: ChatPersona) -> tuple[float, float, float]:
    """(E[turns], E[prompt tokens], E[output tokens]) per session over the dataset's conversations, each
    equally likely (bytes / 4 here): every turn resends the system texts and the history so far."""
    assert p.dataset is not None
    spec = p.dataset
    dialogs = load_dataset(spec.path, spec.format, spec.limit)
    turns_sum = prompt_sum = output_sum = 0.0
    output_mean = p.output_tokens.mean_estimate()
    for d in dialogs:
        shown = d.turns[: spec.max_turns or len(d.turns)]
        system = p.system_prompt_tokens + (count_tokens(d.system) if d.system else 0)
        history = 0.0
        for turn in shown:
            user = count_tokens(turn.user)
            reply = count_tokens(turn.reply) if turn.reply is not None else output_mean
            out = reply if spec.output_tokens == "dataset" and turn.reply is not None else output_mean
            prompt_sum += system + history + user
            output_sum += out
            history += user + reply
        turns_sum += len(shown)
    n = len(dialogs)
    return turns_sum / n, prompt_sum / n, output_sum / n


def _chat(p: ChatPersona, sc: Scenario, ttft_s: float = 0.5, tpot_s: float = 0.02) -> PersonaPlan:
    sessions = sum(p.arrival.rate * ph.rate_scale * ph.duration for ph in sc.phases)
    if p.concurrency is not None:  # closed loop: sessions follow each other, as fast as the assumed answers allow
        turns = max(1.0, p.turns.mean_estimate())
        call_s = ttft_s + p.output_tokens.mean_estimate() * tpot_s
        session_s = max(1e-3, turns * call_s + (turns - 1) * max(0.0, p.think_time_s.mean_estimate()))
        sessions = p.concurrency * sc.duration_s / session_s
    if p.dataset is not None:
        turns_mean, prompt_per_session, output_per_session = _dataset_session(p)
        return PersonaPlan(
            persona=p.name, tier=p.tier, kind="chat", units=sessions, unit_name="sessions",
            requests=sessions * turns_mean, prompt_tokens=sessions * prompt_per_session,
            output_tokens=sessions * output_per_session,
            notes=[f"E[turns]={turns_mean:.2f}", f"dataset {Path(p.dataset.path).name}"],
        )
    turns_mean, turns_sq = _moments(p.turns)
    turns_mean = max(turns_mean, 1.0)
    turns_sq = max(turns_sq, turns_mean)
    prompt = p.prompt_tokens.mean_estimate()
    output = p.output_tokens.mean_estimate()
    pair_up = (turns_sq + turns_mean) / 2  # E[T(T+1)/2]
    pair_down = (turns_sq - turns_mean) / 2  # E[T(T-1)/2]
    prompt_per_session = turns_mean * p.system_prompt_tokens + prompt * pair_up + output * pair_down
    return PersonaPlan(
        persona=p.name,
        tier=p.tier,
        kind="chat",
        units=sessions,
        unit_name="sessions",
        requests=sessions * turns_mean,
        prompt_tokens=sessions * prompt_per_session,
        output_tokens=sessions * turns_mean * output,
        notes=[f"E[turns]={turns_mean:.2f}"],
    )


def _agents(p: AgentSwarmPersona, sc: Scenario, ttft_s: float, tpot_s: float) -> PersonaPlan:
    steps = max(1.0, p.steps.mean_estimate())
    fanout = max(1.0, p.fanout.mean_estimate())
    output = p.output_tokens.mean_estimate()
    tool = max(0.0, p.tool_time_s.mean_estimate())
    idle = max(0.0, p.idle_between_tasks_s.mean_estimate())
    call_s = ttft_s + output * tpot_s
    task_s = max(1e-3, steps * (call_s + tool) + idle)
    if p.start == "arrivals" and p.task_rate:
        tasks = sum(p.task_rate * ph.rate_scale * ph.duration for ph in sc.phases)
    else:
        tasks = (
            sum(
                p.agents * (ph.agents_scale if ph.agents_scale is not None else ph.rate_scale) * ph.duration
                for ph in sc.phases
            )
            / task_s
        )
        if p.start == "stampede":
            tasks = max(tasks, float(p.agents))
    growth = p.append_tokens.mean_estimate() + output
    base = p.shared_context_tokens + p.task_context_tokens.mean_estimate()
    mean_prompt = min(float(p.context_cap_tokens), base + (steps - 1) / 2 * growth)
    requests = tasks * steps * fanout
    prompt_tokens = requests * mean_prompt
    notes = [f"E[task]={task_s:.1f}s", f"E[steps]={steps:.2f}", f"E[fanout]={fanout:.2f}"]
    sub = p.subagents
    if sub is not None and sub.probability > 0:
        # spawning steps (every step but the last, with the probability) × sub-agents × their steps; each
        # sub-agent call resends the shared context and the brief, and its own history grows like a task's
        spawns = tasks * max(0.0, steps - 1) * sub.probability * max(1.0, sub.fan_out.mean_estimate())
        sub_steps = max(1.0, sub.steps.mean_estimate())
        sub_requests = spawns * sub_steps
        sub_prompt = p.shared_context_tokens + sub.prefix_tokens + (sub_steps - 1) / 2 * growth
        requests += sub_requests
        prompt_tokens += sub_requests * min(float(p.context_cap_tokens), sub_prompt)
        notes.append(f"sub-agent calls {sub_requests:.0f}")
    return PersonaPlan(
        persona=p.name,
        tier=p.tier,
        kind="agent_swarm",
        units=tasks,
        unit_name="tasks",
        requests=requests,
        prompt_tokens=prompt_tokens,
        output_tokens=requests * output,
        notes=notes,
    )


def _trace_rows(path: Path) -> list[tuple[float, float, float]]:
    """(seconds from the first row, prompt tokens, output tokens) for Azure CSV or Mooncake JSONL."""
    rows: list[tuple[float, float, float]] = []
    if path.suffix == ".csv":
        with path.open(newline="") as handle:
            first: datetime | None = None
            for row in csv.DictReader(handle):
                stamp = datetime.fromisoformat(row["TIMESTAMP"].strip()[:26])
                first = first or stamp
                rows.append(
                    ((stamp - first).total_seconds(), float(row["ContextTokens"]), float(row["GeneratedTokens"]))
                )
    else:
        with path.open() as handle:
            for line in handle:
                if line.strip():
                    obj = json.loads(line)
                    rows.append(
                        (float(obj["timestamp"]) / 1000.0, float(obj["input_length"]), float(obj["output_length"]))
                    )
    return rows


def _replay(p: TraceReplayPersona, sc: Scenario, ttft_s: float, tpot_s: float) -> PersonaPlan:
    rows = _trace_rows(resolve_trace_path(p.trace))
    duration = sc.duration_s
    picked = [r for r in rows if 0 <= (r[0] - p.start_s) / p.time_scale < duration]
    if p.limit is not None:
        picked = picked[: p.limit]
    return PersonaPlan(
        persona=p.name,
        tier=p.tier,
        kind="trace_replay",
        units=len(picked),
        unit_name="rows",
        requests=float(len(picked)),
        prompt_tokens=sum(min(r[1], p.max_prompt_tokens) for r in picked),
        output_tokens=sum(min(r[2], p.max_output_tokens) for r in picked),
        notes=[f"{len(rows)} rows in trace"],
    )


def _agent_trace(p: AgentTracePersona, sc: Scenario, ttft_s: float, tpot_s: float) -> PersonaPlan:
    """The sessions that start within the run, every call of each (sub-agents' included), sizes capped."""
    sessions = read_agent_trace(resolve_trace_path(p.trace), p.format, p.sessions)
    gap = p.session_gap_s / p.time_scale
    picked = [s for n, s in enumerate(sessions) if n * gap < sc.duration_s]
    calls = [c for s in picked for run in s.runs() for c in run.calls]
    notes = [f"{len(sessions)} session(s) read, {sum(s.spawning_calls for s in picked)} call(s) spawn "
             f"{sum(s.subagent_calls for s in picked)} sub-agent call(s); a session may outlast the run"]
    if p.subagent_tiers:
        notes.append("sub-agent calls of " + ", ".join(f"{k} → {v}" for k, v in sorted(p.subagent_tiers.items()))
                     + f" are counted here under {p.tier}")
    return PersonaPlan(
        persona=p.name,
        tier=p.tier,
        kind="agent_trace",
        units=len(picked),
        unit_name="sessions",
        requests=float(len(calls)),
        prompt_tokens=sum(min(c.prompt_tokens, p.max_prompt_tokens) for c in calls),
        output_tokens=sum(max(1, min(c.output_tokens, p.max_output_tokens)) for c in calls),
        notes=notes,
    )


# each persona kind's estimate (persona, scenario, assumed TTFT s, assumed TPOT s), by its ``kind``; the trace
# replays ignore the assumed timings (their trace sets the times)
ESTIMATES: Mapping[str, Callable[[Any, Scenario, float, float], PersonaPlan]] = every_kind(
    {"chat": _chat, "agent_swarm": _agents, "trace_replay": _replay, "agent_trace": _agent_trace}, __name__)


# --------------------------------------------------------------------------- plan


def plan(
    scenario: Scenario,
    *,
    prices: Prices | None = None,
    assumed_ttft_s: float = 0.5,
    assumed_tpot_s: float = 0.02,
) -> DryRunPlan:
    """Expected requests, tokens and cost per persona and tier; sends nothing."""
    tier_names = [t.name for t in scenario.tiers]
    if prices is None:
        prices = prices_from_budget(scenario.budget, tier_names)
    personas: list[PersonaPlan] = []
    for persona in scenario.personas:
        pp = ESTIMATES[persona.kind](persona, scenario, assumed_ttft_s, assumed_tpot_s)
        _with_twins(pp, scenario)
        if prices is not None and pp.tier in prices:
            p_in, p_out = prices[pp.tier]
            pp.cost_usd = (pp.prompt_tokens * p_in + pp.output_tokens * p_out) / 1e6
        personas.append(pp)
    tiers = {name: TierPlan(name) for name in tier_names}
    for pp in personas:
        t = tiers[pp.tier]
        t.requests += pp.requests
        t.prompt_tokens += pp.prompt_tokens
        t.output_tokens += pp.output_tokens
        if pp.cost_usd is not None:
            t.cost_usd = (t.cost_usd or 0.0) + pp.cost_usd
    result = DryRunPlan(scenario.name, scenario.duration_s, personas, tiers, priced=prices is not None)
    result.budget_warnings = _budget_warnings(scenario.budget, result)
    return result


def _with_twins(pp: PersonaPlan, scenario: Scenario) -> None:
    """The priority control's twins are sent and billed too: a share of the requests again."""
    spec = scenario.control_for(pp.tier)
    if spec is None:
        return
    twins = pp.requests * spec.share
    scale = 1 + spec.share
    pp.requests *= scale
    pp.prompt_tokens *= scale
    pp.output_tokens *= scale
    pp.notes.append(f"includes ≈{twins:.0f} equal-priority control twins (control.share {spec.share:g})")


def _budget_warnings(budget: Budget | None, p: DryRunPlan) -> list[str]:
    if budget is None:
        return []
    out: list[str] = []

    def check(scope: str, b: Budget, requests: float, tokens: float, cost: float | None) -> None:
        if b.max_requests is not None and requests > b.max_requests:
            out.append(f"{scope}: ~{requests:.0f} requests > max_requests {b.max_requests} (run stops early)")
        if b.max_tokens is not None and tokens > b.max_tokens:
            out.append(f"{scope}: ~{tokens:.0f} tokens > max_tokens {b.max_tokens} (run stops early)")
        if b.max_cost_usd is not None and cost is not None and cost > b.max_cost_usd:
            out.append(f"{scope}: ~${cost:.2f} > max_cost_usd {b.max_cost_usd} (run stops early)")

    if budget.max_cost_usd is not None and not p.priced:
        out.append("run: max_cost_usd is set but no price is: the cost limit cannot be enforced")
    check("run", budget, p.requests, p.tokens, p.cost_usd)
    for name, b in budget.per_tier.items():
        t = p.tiers.get(name)
        if t is not None:
            check(f"tier {name}", b, t.requests, t.tokens, t.cost_usd)
    return out


def render_plan(p: DryRunPlan) -> Table:
    """A rich table: one row per persona, a subtotal per tier, the total."""
    from rich.table import Table

    table = Table(title=f"dry run: {p.scenario} ({p.duration_s:g} s, nothing sent)")
    for col in ("tier", "persona", "kind", "units", "requests", "prompt tok", "output tok"):
        table.add_column(col, justify="right" if col not in ("tier", "persona", "kind") else "left")
    if p.priced:
        table.add_column("cost USD", justify="right")

    def money(v: float | None) -> list[str]:
        if not p.priced:
            return []
        return ["-" if v is None else f"{v:,.2f}"]

    for tier in p.tiers.values():
        for pp in (x for x in p.personas if x.tier == tier.tier):
            table.add_row(
                tier.tier,
                pp.persona,
                pp.kind,
                f"{pp.units:,.0f} {pp.unit_name}",
                f"{pp.requests:,.0f}",
                f"{pp.prompt_tokens:,.0f}",
                f"{pp.output_tokens:,.0f}",
                *money(pp.cost_usd),
            )
        table.add_row(
            f"[bold]{tier.tier}[/bold]",
            "all",
            "",
            "",
            f"{tier.requests:,.0f}",
            f"{tier.prompt_tokens:,.0f}",
            f"{tier.output_tokens:,.0f}",
            *money(tier.cost_usd),
            end_section=True,
        )
    table.add_row(
        "[bold]total[/bold]",
        "",
        "",
        "",
        f"{p.requests:,.0f}",
        f"{sum(t.prompt_tokens for t in p.tiers.values()):,.0f}",
        f"{sum(t.output_tokens for t in p.tiers.values()):,.0f}",
        *money(p.cost_usd),
    )
    if p.budget_warnings:
        table.caption = "; ".join(p.budget_warnings)
    return table
