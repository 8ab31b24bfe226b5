"""Locust-native rushhour: ``User`` classes (chat, agent swarm, trace replay) that write a run folder.

A plain locustfile subclasses ``ChatUser``, ``AgentUser`` or ``ReplayUser`` (public face:
``rushhour.locust``) and sets knobs as class attributes. ``locust -f file.py`` then writes the same
run folder as ``rushhour run``: ``run.json`` (a scenario built from the classes) and one
``records/<host>-<pid>.jsonl`` shard per Locust process, so ``rushhour audit``/``report``/``gate``
work on it. Each Locust user is one closed-loop user (a chat session, or an agent working task after
task); Locust's user count, spawn rate, ``wait_time`` and run time shape the load.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import gevent
from gevent.pool import Group
from locust import User, events, task
from locust.env import Environment
from locust.exception import StopUser
from pydantic import ValidationError

from rushhour.loadgen import prompts, runkey
from rushhour.loadgen.datasets import load_dataset
from rushhour.loadgen.engine import sealed
from rushhour.loadgen.engine.attempts import Pools
from rushhour.loadgen.engine.bridge import request_event
from rushhour.loadgen.engine.context import WorkerContext, build_routes
from rushhour.loadgen.engine.guards import attach_guards, usage_event
from rushhour.loadgen.engine.health import run_health
from rushhour.loadgen.engine.lifecycle import (
    add_run_options,
    anchor_of,
    ensure_run_id,
    install_master_guards,
    set_anchor,
    state_of,
    tolerate_slow_workers,
)
from rushhour.loadgen.engine.personas.agents import agent_task
from rushhour.loadgen.engine.personas.chat import chat_session
from rushhour.loadgen.engine.personas.drive import drive, host_of
from rushhour.loadgen.engine.wire.client import Cancelled
from rushhour.loadgen.flow import replay
from rushhour.loadgen.lifecycle import Lifecycle, Scrape, new_manifest
from rushhour.loadgen.live import ShardTail
from rushhour.loadgen.traces import DATASET, TraceError, TraceRef, TraceRow, check_trace_file, read_trace, schedule
from rushhour.records.record import Anchor, ShardWriter
from rushhour.scenarios.distributions import resolve_trace_path
from rushhour.scenarios.kinds import as_kind, of_kind
from rushhour.scenarios.model import (
    AgentSwarmPersona,
    ChatPersona,
    Phase,
    Scenario,
    TraceReplayPersona,
)

# a user's own master and workers that share RUSHHOUR_RUN_SECRET get every frame sealed, as `rushhour run` does;
# without it they keep Locust's transport as it is (unauthenticated: a private network only)
if os.environ.get(runkey.SECRET_ENV):
    sealed.install()

PHASE = "locust"  # the one phase of a Locust-native run: from the anchor to Locust's stop
OPEN_ENDED_S = 6 * 86400.0  # the phase's length until the run ends (web UI runs have no -t; the limit is 7 days)
CANCEL_GRACE_S = 5.0
_COMMON = ("tier", "priority", "objective", "tenants", "slo", "service_tier", "headers")
# the run's knobs: every class must agree (one locustfile drives one target with one set of guards)
_RUN_WIDE = ("profile", "model", "dialect", "stream", "seed", "fallback", "breaker", "budget", "calibration",
             "metrics")


class RushhourUser(User):
    """Base of rushhour's Locust users: the target and the tier every request travels on.

    Knobs (class attributes): ``tier`` (name), ``priority`` (higher = more urgent, mapped per stack),
    ``objective`` (llm-d objective, default the tier name), ``tenants`` (count or ids), ``slo`` (the
    tier's SLO as in a scenario, e.g. ``{"ttft_ms": {"p90": 2000}}``), ``profile``, ``model``,
    ``dialect``, ``stream``, ``persona`` (name in records; default the class name), ``seed``,
    ``ttft_timeout_s`` and ``total_timeout_s``. Resilience, as in a scenario: ``retries`` (the tier's
    retry policy), ``control`` (the tier's priority control), and for the whole run ``fallback`` (routes
    after the primary), ``breaker`` (one per route) and ``budget`` (requests/tokens/dollars; under
    master + workers one budget leased by the master), ``calibration`` (idle probes before the run's clock).
    """

    abstract = True
    tier: ClassVar[str] = "default"
    priority: ClassVar[int] = 0
    objective: ClassVar[str | None] = None
    tenants: ClassVar[int | list[str]] = 1
    slo: ClassVar[dict[str, Any]] = {}
    service_tier: ClassVar[str | None] = None
    headers: ClassVar[dict[str, str]] = {}
    profile: ClassVar[str] = "llm-d"
    model: ClassVar[str] = "testbed"
    dialect: ClassVar[str] = "openai-chat"
    stream: ClassVar[bool] = True
    persona: ClassVar[str] = ""
    seed: ClassVar[int] = 1
    ttft_timeout_s: ClassVar[float] = 120.0
    total_timeout_s: ClassVar[float] = 600.0
    retries: ClassVar[dict[str, Any] | None] = None  # the tier's retry policy (scenario tiers[].retries)
    control: ClassVar[dict[str, Any] | None] = None  # the tier's priority control (scenario tiers[].control)
    fallback: ClassVar[list[dict[str, Any]]] = []  # the run's: resilience.fallback
    breaker: ClassVar[dict[str, Any] | None] = None  # the run's: resilience.breaker
    budget: ClassVar[dict[str, Any] | None] = None  # the run's: budget
    calibration: ClassVar[dict[str, Any] | None] = None  # the run's idle probes (None: none; {} the scenario's 5)
    metrics: ClassVar[dict[str, Any] | None] = None  # the target's /metrics scraper (None: none; {} auto)
    kind: ClassVar[str] = ""
    knobs: ClassVar[tuple[str, ...]] = ()  # the persona fields this class passes on

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self._run: LocustRun | None = None

    @classmethod
    def persona_name(cls) -> str:
        return cls.persona or cls.__name__

    @classmethod
    def persona_spec(cls) -> dict[str, Any]:
        """This class as a scenario persona (validated when the run starts)."""
        spec: dict[str, Any] = {"kind": cls.kind, "name": cls.persona_name(), "tier": cls.tier}
        for knob in cls.knobs:
            value = getattr(cls, knob)
            if value is not None:
                spec[knob] = {"path": value} if knob == "dataset" and isinstance(value, str | Path) else value
        return spec

    def on_start(self) -> None:
        self._run = process_run(self.environment)

    def drive(self, fn: Any, *args: Any) -> Any:
        """Run one session/task in the process's group; a stop mid-way records its attempts as cancelled."""
        run = self._run or process_run(self.environment)
        if run.ctx.stopping:
            gevent.sleep(1.0)
            return None
        work = run.group.spawn(fn, *args)
        try:
            return work.get()
        except gevent.GreenletExit:
            # Locust stops this user: end its in-flight requests as ``cancelled`` records, not silence
            work.kill(exception=Cancelled, block=True, timeout=CANCEL_GRACE_S)
            raise


class ChatUser(RushhourUser):
    """A chat user: each task is one session of ``turns`` turns, ``think_time_s`` apart (closed loop).

    Knobs: ``turns``, ``think_time_s``, ``system_prompt_tokens``, ``prompt_tokens``, ``output_tokens``,
    ``patience_s``, ``on_abandon``, ``abandon_retries`` — numbers or distributions as in a scenario
    (``{"dist": "lognormal", "median": 300, "sigma": 1}``); ``dataset`` (a file of conversations, next
    to the locustfile or the working directory, or a shipped one; or a scenario's ``dataset`` mapping):
    each session replays a sampled conversation's turns. Locust's ``wait_time`` spaces sessions.
    """

    abstract = True
    kind = "chat"
    knobs = ("turns", "think_time_s", "system_prompt_tokens", "prompt_tokens", "output_tokens", "patience_s",
             "on_abandon", "abandon_retries", "dataset")
    tier = "interactive"
    turns: ClassVar[Any] = 1
    think_time_s: ClassVar[Any] = 5.0
    system_prompt_tokens: ClassVar[int] = 256
    prompt_tokens: ClassVar[Any] = 300
    output_tokens: ClassVar[Any] = 64
    patience_s: ClassVar[Any] = None
    on_abandon: ClassVar[str] = "leave"
    abandon_retries: ClassVar[int] = 1
    dataset: ClassVar[str | dict[str, Any] | None] = None

    @classmethod
    def persona_spec(cls) -> dict[str, Any]:
        """This class as a scenario chat persona; its arrival rate is unused (Locust's users and wait_time pace
        the sessions)."""
        return {**super().persona_spec(), "arrival": {"rate": 1.0}}

    @task
    def session(self) -> None:
        run = self._run or process_run(self.environment)
        persona = as_kind(run.persona(type(self)), ChatPersona)
        instance = run.next_instance(persona.name)
        tenants = run.ctx.scenario.tier(persona.tier).tenant_ids
        tenant = run.ctx.rng(persona.name, run.ctx.worker_index, instance, "tenant").choice(tenants)
        system = (prompts.text(f"system:{persona.name}", persona.system_prompt_tokens)
                  if persona.system_prompt_tokens else "")
        self.drive(chat_session, run.ctx, persona, instance, tenant, system, run.ctx.now_ns())


class AgentUser(RushhourUser):
    """One agent of a swarm: each task fans out, waits for tools, returns with a longer shared prefix.

    Knobs: ``steps``, ``fanout``, ``tool_time_s``, ``shared_context_tokens``, ``task_context_tokens``,
    ``append_tokens``, ``output_tokens``, ``context_cap_tokens``, ``deadline_s``, ``deadline_factor``,
    ``after_failure_s``, ``tools``, ``subagents`` (e.g. ``{"probability": 0.2, "fan_out": 3, "steps": 2}``:
    calls that spawn sub-agents, the parent waiting for them), ``dataset`` (as ``ChatUser``'s: each task's
    context is a sampled conversation's first turn). Locust's ``wait_time`` is the idle time between tasks.
    """

    abstract = True
    kind = "agent_swarm"
    knobs = ("steps", "fanout", "tool_time_s", "shared_context_tokens", "task_context_tokens", "append_tokens",
             "output_tokens", "context_cap_tokens", "deadline_s", "deadline_factor", "after_failure_s", "tools",
             "subagents", "dataset")
    tier = "batch"
    steps: ClassVar[Any] = 4
    fanout: ClassVar[Any] = {"dist": "uniform", "low": 1, "high": 3}
    tool_time_s: ClassVar[Any] = 0.5
    shared_context_tokens: ClassVar[int] = 2048
    task_context_tokens: ClassVar[Any] = 512
    append_tokens: ClassVar[Any] = 256
    output_tokens: ClassVar[Any] = 64
    context_cap_tokens: ClassVar[int] = 128000
    deadline_s: ClassVar[float | None] = None
    deadline_factor: ClassVar[float] = 3.0
    after_failure_s: ClassVar[Any] = 1.0
    tools: ClassVar[Any] = False
    subagents: ClassVar[dict[str, Any] | None] = None
    dataset: ClassVar[str | dict[str, Any] | None] = None

    def on_start(self) -> None:
        super().on_start()
        self.pools = Pools(max_idle=1)
        self.agent = 0

    def on_stop(self) -> None:
        self.pools.close()

    @task
    def work(self) -> None:
        run = self._run or process_run(self.environment)
        persona = as_kind(run.persona(type(self)), AgentSwarmPersona)
        instance = run.next_instance(persona.name)
        ctx = run.ctx
        rng = ctx.rng(persona.name, ctx.worker_index, instance)
        tenant = rng.choice(ctx.scenario.tier(persona.tier).tenant_ids)
        task_id = f"{persona.name}-w{ctx.worker_index}-t{instance}"
        outcome = self.drive(agent_task, ctx, persona, self.pools, tenant, task_id, rng, ctx.now_ns())
        if outcome == "failed":  # harnesses back off after a failed task; no hot retry loop
            gevent.sleep(persona.after_failure_s.sample(rng))


class ReplayUser(RushhourUser):
    """Replays a trace once, open loop: each row is sent at its (scaled) time after this user started.

    One per run by default (``fixed_count = 1``): the rows are not split across users. Knobs:
    ``trace`` (a shipped trace name or a file), ``format``, ``time_scale``, ``start_s``, ``limit``,
    ``max_in_flight``, ``max_prompt_tokens``, ``max_output_tokens``.
    """

    abstract = True
    fixed_count = 1
    kind = "trace_replay"
    knobs = ("trace", "format", "time_scale", "start_s", "limit", "max_in_flight", "max_prompt_tokens",
             "max_output_tokens")
    tier = "batch"
    trace: ClassVar[str] = ""
    format: ClassVar[str] = "auto"
    time_scale: ClassVar[float] = 1.0
    start_s: ClassVar[float] = 0.0
    limit: ClassVar[int | None] = None
    max_in_flight: ClassVar[int] = 500
    max_prompt_tokens: ClassVar[int] = 32000
    max_output_tokens: ClassVar[int] = 2000

    @task
    def replay(self) -> None:
        run = self._run or process_run(self.environment)
        persona = as_kind(run.persona(type(self)), TraceReplayPersona)
        plan = run.plans[persona.name]
        self.drive(_replay, run, persona, plan, run.ctx.now_s())
        raise StopUser()  # the trace is done; Locust's run time decides when the run ends


def _replay(run: LocustRun, persona: TraceReplayPersona, plan: list[tuple[float, TraceRow]], start_s: float
            ) -> None:
    """The whole trace from ``start_s`` (``loadgen.flow.replay``); returns when every row's request ended."""
    host = host_of(run.ctx)
    pools = Pools(max_idle=min(64, persona.max_in_flight))
    calls = Group()
    try:
        drive(host, pools, replay.run_replay(host, persona, plan, start_s, whole=True), calls)
        calls.join()
    except BaseException:
        calls.kill(exception=Cancelled, block=True, timeout=CANCEL_GRACE_S)
        raise
    finally:
        pools.close()


# --------------------------------------------------------------------------- the scenario of a locustfile


def user_classes(environment: Environment) -> list[type[RushhourUser]]:
    """The rushhour user classes this Locust runs (others, e.g. a plain HttpUser, are not rushhour's)."""
    return [c for c in environment.user_classes if isinstance(c, type) and issubclass(c, RushhourUser)]


def scenario_for(classes: list[type[RushhourUser]], host: str, duration_s: float, name: str = "locustfile",
                 base: Path | None = None) -> Scenario:
    """The scenario a set of user classes amounts to (tiers, personas, target); ``ValueError`` when they clash.

    Dataset paths are looked up next to ``base`` (the locustfile's folder), in the working directory,
    then among the shipped datasets, read once, and named by their absolute path.
    """
    if not classes:
        raise ValueError("no rushhour user class in the locustfile (subclass ChatUser, AgentUser or ReplayUser)")
    first = classes[0]
    tiers: dict[str, dict[str, Any]] = {}
    for cls in classes:
        for attr in _RUN_WIDE:
            if getattr(cls, attr) != getattr(first, attr):
                raise ValueError(f"{cls.__name__}.{attr} = {getattr(cls, attr)!r} but {first.__name__}.{attr} = "
                                 f"{getattr(first, attr)!r}: one locustfile drives one target with one set of "
                                 "guards (set it once, e.g. on a shared base class)")
        spec = {"name": cls.tier, "priority": cls.priority, "tenants": cls.tenants, "slo": dict(cls.slo),
                "headers": dict(cls.headers)}
        for attr in ("objective", "service_tier", "retries", "control"):
            if getattr(cls, attr) is not None:
                spec[attr] = getattr(cls, attr)
        seen = tiers.setdefault(cls.tier, spec)
        if seen != spec:
            raise ValueError(f"tier {cls.tier!r} is set differently by two user classes (priority, tenants, slo, "
                             f"objective, headers, retries, control): set it once, e.g. on a shared base class")
    for i, route in enumerate(first.fallback or []):
        if isinstance(route, dict) and route.get("url") == "testbed":  # only `rushhour run` starts route testbeds
            raise ValueError(f"{first.__name__}.fallback.{i}.url: 'testbed' is started by `rushhour run` only; "
                             "give the route's URL (e.g. http://127.0.0.1:8001)")
    names = [c.persona_name() for c in classes]
    if len(set(names)) != len(names):
        raise ValueError(f"two user classes share a persona name: {names}")
    data = {
        "name": name,
        "seed": first.seed,
        "target": {"url": host, "profile": first.profile, "model": first.model, "dialect": first.dialect,
                   "stream": first.stream, "metrics": first.metrics},
        "tiers": list(tiers.values()),
        "personas": [c.persona_spec() for c in classes],
        "phases": [{"name": PHASE, "duration": duration_s}],
        "resilience": {"timeouts": {"ttft_s": first.ttft_timeout_s, "total_s": first.total_timeout_s},
                       "fallback": list(first.fallback or []), "breaker": first.breaker},
        "budget": first.budget,
        "calibration": {"probes": 0} if first.calibration is None else first.calibration,
        "drain_s": 0,
    }
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{_where(classes, err['loc'])}: {err['msg']}") from None
    return _with_datasets(scenario, classes, base)


def _with_datasets(scenario: Scenario, classes: list[type[RushhourUser]], base: Path | None) -> Scenario:
    """Each persona's dataset found, read once (garbage is one line now, not mid-run) and named absolutely."""
    personas = []
    for cls, persona in zip(classes, scenario.personas, strict=True):
        spec = getattr(persona, "dataset", None)
        if spec is not None:
            try:
                path = locate_dataset(spec.path, base)
                check_trace_file(path, TraceRef("dataset", str(path), f"{DATASET}:{spec.format}"))
            except TraceError as exc:
                raise ValueError(f"{cls.__name__}.dataset: {exc}") from None
            persona = persona.model_copy(update={"dataset": spec.model_copy(update={"path": str(path)})})
        personas.append(persona)
    return scenario.model_copy(update={"personas": personas})


def locate_dataset(name: str, base: Path | None) -> Path:
    """A dataset file: as given if absolute, else next to ``base``, in the working directory, or shipped."""
    from rushhour.scenarios.distributions import BUNDLED_DATASETS

    path = Path(os.path.expanduser(name))
    bases = [] if path.is_absolute() else [*([base] if base else []), Path.cwd(), BUNDLED_DATASETS]
    candidates = [path] if path.is_absolute() else [b / path for b in bases]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        where = ", ".join(str(b) for b in bases) or str(path)
        raise TraceError(f"{name!r} not found (looked in {where})")
    return found.resolve()


def locustfile_dir(opts: Any) -> Path | None:
    """The folder of the locustfile Locust was given (dataset paths are relative to it), if one file."""
    name = str(getattr(opts, "locustfile", "") or "").split(",")[0]
    path = Path(name).expanduser() if name else None
    return path.resolve().parent if path is not None and path.is_file() else None


def _where(classes: list[type[RushhourUser]], loc: tuple[Any, ...]) -> str:
    """A validation error's place as the user wrote it: ``Chat.prompt_tokens`` rather than ``personas.0.chat…``."""
    if len(loc) >= 3 and loc[0] == "personas" and isinstance(loc[1], int) and loc[1] < len(classes):
        rest = [str(p) for p in loc[3:]] if loc[2] == classes[loc[1]].kind else [str(p) for p in loc[2:]]
        return ".".join([classes[loc[1]].__name__, *rest])
    if len(loc) >= 2 and loc[0] == "tiers" and isinstance(loc[1], int):  # a tier's knob: the class that set it
        names = list(dict.fromkeys(c.tier for c in classes))
        owner = next((c for c in classes if loc[1] < len(names) and c.tier == names[loc[1]]), classes[0])
        return ".".join([owner.__name__, *(str(p) for p in loc[2:])])
    if loc and loc[0] in ("resilience", "budget", "calibration", "target"):  # the run's: Chat.fallback.0.url, …
        knob = loc[1:] if loc[0] in ("resilience", "target") else loc
        return ".".join([classes[0].__name__, *(str(p) for p in knob)])
    return ".".join(str(p) for p in loc)


# --------------------------------------------------------------------------- one Locust process's run


@dataclass
class LocustRun:
    """What one Locust process shares while its users drive load: context, group, counters."""

    ctx: WorkerContext
    group: Group = field(default_factory=Group)
    personas: dict[str, Any] = field(default_factory=dict)
    plans: dict[str, list[tuple[float, TraceRow]]] = field(default_factory=dict)  # replay persona -> its rows
    instances: dict[str, int] = field(default_factory=dict)
    health: gevent.Greenlet | None = None
    closed: bool = False

    def persona(self, cls: type[RushhourUser]) -> Any:
        return self.personas[cls.persona_name()]

    def next_instance(self, persona: str) -> int:
        self.instances[persona] = self.instances.get(persona, 0) + 1
        return self.instances[persona]

    def close(self, reason: str) -> None:
        """Cancel what is still in flight, write ``worker_stop`` and close the shard (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self.ctx.stopping = True
        self.group.kill(exception=Cancelled, block=True, timeout=CANCEL_GRACE_S)
        if self.health is not None:
            self.health.kill(block=False)
        if not self.ctx.writer.closed:
            usage_event(self.ctx)  # the budget's share and use (a leased one goes back to the master)
            self.ctx.event("worker_stop", reason=self.ctx.stop_reason or reason)
        self.ctx.writer.close()


class Rebound:
    """A Locust runner whose custom-message listeners are bound again by a later test of the same Locust
    (Locust refuses a second listener for a message; each web-UI test gets fresh guards and ledger)."""

    def __init__(self, runner: Any, listeners: dict[str, Any]) -> None:
        self.runner = runner
        self.listeners = listeners  # message -> this test's listener (the process's, kept across tests)

    def register_message(self, kind: str, listener: Any, concurrent: bool = False) -> None:
        if kind not in self.listeners:
            self.runner.register_message(kind, functools.partial(_dispatch, self.listeners, kind), concurrent)
        self.listeners[kind] = listener

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)


def _dispatch(listeners: dict[str, Any], kind: str, **kwargs: Any) -> Any:
    return listeners[kind](**kwargs)


def _install_master_parts(environment: Environment, scenario: Scenario, run_dir: Path) -> None:
    """A master holds the test's one budget (leased to its workers) and relays its breakers' changes,
    as under ``rushhour run --processes`` (loadgen/engine/lease.py, loadgen/engine/breaker_share.py)."""
    opts: Any = environment.parsed_options
    state = _state(environment)
    runner = Rebound(environment.runner, state.listeners)
    ledger = install_master_guards(runner, scenario, run_dir, int(getattr(opts, "expect_workers", 1) or 1))
    if ledger is not None:
        state.ledgers.append(ledger)
        done: set[str] = set()

        def on_spent(msg: Any, **_: Any) -> None:
            """A worker's budget is spent and nothing is in flight: once every worker says so, the test ends."""
            done.add(str(msg.node_id))
            master: Any = environment.runner  # a MasterRunner: its workers are its clients
            live = [c for c in master.clients.all if str(c.state) != "missing"]
            if done >= {str(c.id) for c in live}:
                _end_test(environment)

        runner.register_message(MSG_BUDGET_SPENT, on_spent)


MSG_BUDGET_SPENT = "rh_budget_spent"  # worker -> master: the run's budget is reached here, nothing in flight
SPENT_POLL_S = 0.2


def _end_test(environment: Environment) -> None:
    """End the test early, as its user would: a headless Locust quits, a web-UI test stops (the UI stays)."""
    runner = environment.runner
    assert runner is not None  # a test ends only under a runner
    headless = bool(getattr(environment.parsed_options, "headless", False))
    gevent.spawn(runner.quit if headless else runner.stop)  # not from inside a message handler or a user


def _end_when_spent(environment: Environment, run: LocustRun, is_worker: bool) -> None:
    """Once the run's budget is reached here and the last request came back, the users would only idle until
    ``-t``: a standalone Locust ends its test, a worker tells its master (which ends it when all have)."""
    ctx, runner = run.ctx, environment.runner
    assert runner is not None  # a user runs only under a runner
    while not run.closed:
        # nothing on the wire, and nothing reserved that is not on it yet: a leased grant is reserved for its
        # send when the master's answer is read, and that send may not have resumed yet (issue #15)
        if ctx.stop_reason == "budget" and ctx.counters.in_flight == 0 and ctx.budget_in_flight() == 0:
            if is_worker:
                ctx.writer.flush()  # its budget_reached line on disk before the master finalises run.json
                with contextlib.suppress(Exception):
                    runner.send_message(MSG_BUDGET_SPENT, {"pid": os.getpid()})
            else:
                _end_test(environment)
            return
        gevent.sleep(SPENT_POLL_S)


def _budget_usage(life: Lifecycle) -> dict[str, Any] | None:
    """run.json's ``budget_usage``: the shards' ``budget_usage`` lines as they are now and the master's account."""
    tail = ShardTail(life.run_dir)
    tail.poll()
    return life.budget_usage(tail.events)


def _stopped_shards(run_dir: Path) -> tuple[int, int]:
    """(shards, shards with their ``worker_stop`` line) of a run folder's load processes."""
    tail = ShardTail(run_dir)
    tail.poll()
    stopped = {e.get("shard") for e in tail.events if e.get("name") == "worker_stop"}
    shards = [p for p in (run_dir / "records").glob("*.jsonl") if not p.stem.endswith("-calibration")]
    return len(shards), len(stopped)


@dataclass
class NativeState:
    """This Locust process's part of a locustfile's runs, on its environment (``lifecycle.state_of``)."""

    run: LocustRun | None = None  # the current test's (a web-UI Locust runs one test after another)
    ledgers: list[Any] = field(default_factory=list)  # the master's LedgerHost of the test (a leased budget)
    life: Lifecycle | None = None  # the master's (or standalone's) run.json of the current test, and its steps
    base: tuple[str, str] | None = None  # the first test's run id and folder (later tests add -2, -3, …)
    tests: int = 0
    init_ns: int | None = None  # when Locust made its environment: a standalone headless -t timer starts after it
    start_ns: int | None = None  # when the test started (a master waits for its workers first)
    stopping_ns: int | None = None  # when Locust began to stop: the phase ends there, the rest is the drain
    scrapers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    listeners: dict[str, Any] = field(default_factory=dict)  # custom message -> this test's listener (Rebound)


def _state(environment: Any) -> NativeState:
    return state_of(environment, NativeState)


def process_run(environment: Environment) -> LocustRun:
    """This process's run, made by its first user (a worker knows its options once the master spawned it)."""
    state = _state(environment)
    if state.run is not None and not state.run.closed:
        return state.run
    # a new test in the same Locust (web UI): the master sent a new run id, folder and anchor
    opts: Any = environment.parsed_options
    runner = environment.runner
    is_worker = bool(getattr(opts, "worker", False))
    worker_index = max(0, getattr(runner, "worker_index", 0)) if is_worker else 0
    workers = int(getattr(opts, "expect_workers", 1) or 1) if is_worker else 1
    scenario = scenario_for(user_classes(environment), environment.host or "", _planned_s(opts),
                            base=locustfile_dir(opts))
    anchor = anchor_of(opts)
    prompts.text("warm-up", 16)  # the first text builds the word table (~0.1 s): not inside a user's first send
    routes = build_routes(scenario, scenario.target.url)
    writer = ShardWriter.for_process(Path(opts.rh_run_dir), run_id=opts.rh_run_id, anchor=anchor)
    ctx = WorkerContext(scenario, opts.rh_run_id, anchor, writer, routes, worker_index, workers)
    ctx.on_attempt = request_event(environment, lambda: state.stopping_ns is not None)
    # the budget (leased from the master under master + workers) and a breaker per route (shared likewise)
    attach_guards(ctx, Rebound(runner, state.listeners) if is_worker else None)
    run = LocustRun(ctx)
    for cls in user_classes(environment):
        run.personas[cls.persona_name()] = next(p for p in scenario.personas if p.name == cls.persona_name())
    ctx.group = run.group
    for replayed in of_kind(scenario.personas, TraceReplayPersona):  # traces are read before any user sends
        rows = read_trace(resolve_trace_path(replayed.trace), replayed.format)  # (reading blocks the process)
        run.plans[replayed.name] = schedule(rows, time_scale=replayed.time_scale, start_s=replayed.start_s,
                                            limit=replayed.limit, end_s=scenario.duration_s)
    for persona in scenario.personas:
        dataset = getattr(persona, "dataset", None)
        if dataset is not None:  # likewise the datasets (cached for every session of the process)
            load_dataset(dataset.path, dataset.format, dataset.limit)
    ctx.event("worker_start", worker_index=worker_index, workers=workers, pid=os.getpid(), host=socket.gethostname())
    run.health = gevent.spawn(run_health, ctx)
    if ctx.budget is not None:
        gevent.spawn(_end_when_spent, environment, run, is_worker)
    state.run = run
    return run


def _planned_s(opts: Any) -> float:
    run_time = getattr(opts, "run_time", None)
    return float(run_time) if run_time else OPEN_ENDED_S


# --------------------------------------------------------------------------- Locust hooks


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    add_run_options(parser)


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    state = _state(environment)
    state.init_ns = time.monotonic_ns()
    opts: Any = environment.parsed_options
    if opts is None or getattr(opts, "worker", False):
        return  # a worker gets run id, folder and anchor from the master with its spawn message
    if not user_classes(environment):
        return
    if getattr(opts, "master", False):
        tolerate_slow_workers()  # as under `rushhour run --processes`: before any worker connects
    ensure_run_id(opts)
    opts.rh_run_dir = str(Path(opts.rh_run_dir or f"runs/{opts.rh_run_id}").resolve())
    state.base = state.base or (opts.rh_run_id, opts.rh_run_dir)
    try:  # the classes' knobs are checked once, before any user starts: one line, then exit
        scenario = scenario_for(user_classes(environment), environment.host or "http://127.0.0.1", _planned_s(opts),
                                base=locustfile_dir(opts))
        for replayed in of_kind(scenario.personas, TraceReplayPersona):
            resolve_trace_path(replayed.trace)
    except (ValueError, FileNotFoundError) as exc:
        sys.stderr.write(f"rushhour: {exc}\n")
        sys.exit(2)
    environment.events.test_start.add_listener(_write_start)


def _write_start(environment: Environment, **_: Any) -> None:
    """The master (or a standalone Locust) writes ``run.json`` when the test starts, and again at the end."""
    opts: Any = environment.parsed_options
    state = _state(environment)
    if opts is None or (state.life is not None and not state.life.manifest.ended_at):
        return
    state.tests += 1
    tests = state.tests
    if tests > 1:  # another test in the same Locust (the web UI's "new test"): its own run folder
        _finish(environment)
        state.life = state.start_ns = state.stopping_ns = None
        base_id, base_dir = state.base or (opts.rh_run_id, opts.rh_run_dir)
        opts.rh_run_id, opts.rh_run_dir = f"{base_id}-{tests}", f"{base_dir}-{tests}"
    state.start_ns = time.monotonic_ns()  # Locust's -t runs from here, the probes' time included
    host = environment.host or ""
    scenario = scenario_for(user_classes(environment), host, _planned_s(opts), base=locustfile_dir(opts))
    master = bool(getattr(opts, "master", False))
    run_dir = Path(opts.rh_run_dir)
    manifest = new_manifest(opts.rh_run_id, scenario, str(getattr(opts, "locustfile", "") or ""), host,
                            duration_s=None, drain_s=0.0,
                            processes=int(getattr(opts, "expect_workers", 1) or 1) if master else 1,
                            locust_pid=os.getpid(), extra={"locust_native": True})
    # the lifecycle of `rushhour run` (loadgen/lifecycle.py), each step taken here, in Locust's master or only process
    life = state.life = Lifecycle(run_dir, manifest)
    # written before the idle probes: a test that ends during them (-t shorter than the probes, a stop) still
    # leaves a run.json, and _finish says it was interrupted there, not a folder the audit cannot read
    life.save()
    life.calibrate(scenario, lambda sizes: _probe_here(scenario, sizes, host, opts.rh_run_id, run_dir))
    # the anchor is the test's start (a web-UI test may start long after Locust did), after the idle probes;
    # the spawn message that follows carries it, with the run id and folder, to every worker
    anchor = Anchor.now()
    set_anchor(opts, anchor.mono_ns, anchor.wall_ns)
    life.anchor(anchor, starts_run=True)
    if master and environment.runner is not None:  # before the spawn message: the workers' first asks find it
        _install_master_parts(environment, scenario, run_dir)
    scraper = life.scraper(scenario, host, lambda where: _scraper_child(where, anchor.mono_ns, run_dir))
    if scraper is not None:
        state.scrapers.append(scraper)


def _probe_here(scenario: Scenario, sizes: list[int], host: str, run_id: str, run_dir: Path) -> dict[str, Any]:
    """The lifecycle's calibration step as a locustfile takes it: the idle probes sent one after another in this
    process (``records/<host>-<pid>-calibration.jsonl`` on its own anchor, as ``rushhour run``'s child writes it)."""
    from rushhour.loadgen.engine.calibrate import run_probes
    from rushhour.loadgen.probes import PROBE_GAP_S, probe_scenario

    probes = probe_scenario(scenario)
    started = time.monotonic()
    anchor = Anchor.now()  # this shard's own: the audit re-bases the probes before t = 0
    writer = ShardWriter.for_process(run_dir, run_id=run_id, anchor=anchor, role="calibration")
    ctx = WorkerContext(probes, run_id, anchor, writer, build_routes(probes, host)[:1])
    try:
        timeouts = probes.resilience.timeouts
        ctx.event("calibration_start", probes=len(sizes), prompt_tokens=list(scenario.calibration.prompt_tokens),
                  ttft_s=timeouts.ttft_s, total_s=timeouts.total_s)
        result = run_probes(ctx, sizes, PROBE_GAP_S)
        result.done = True
        ctx.event("calibration_end", **dataclasses.asdict(result))
    finally:
        writer.close()
    return {"pid": os.getpid(), "seconds": round(time.monotonic() - started, 3), "probes": len(sizes),
            "sent": result.sent, "served": result.served, "gave_up": result.gave_up}


def _scraper_child(where: Scrape, anchor_mono_ns: int, run_dir: Path) -> subprocess.Popen[bytes]:
    """The lifecycle's scraper step as a locustfile takes it: a child process (a thread here would parse on the
    users' gevent loop: loadgen/scrape.py), stopped by PID when the test stops."""
    from rushhour.loadgen.testbed_proc import child_env

    metrics = where.options
    cmd = [sys.executable, "-m", "rushhour.loadgen.scrape", where.url, str(where.path), "--interval-s",
           str(metrics.interval_s), "--timeout-s", str(metrics.timeout_s), "--anchor-ns", str(anchor_mono_ns),
           "--profile", where.profile]
    if metrics.credential is not None:  # the child reads the variable; the token is never on a command line
        cmd += ["--credential", metrics.credential]
    with (run_dir / "scrape.log").open("ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=child_env())


def _stop_scrapers(state: NativeState) -> None:
    """SIGTERM to each scraper child (it ends after its scrape in progress), then SIGKILL after a grace."""
    for proc in state.scrapers:
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=SCRAPER_STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    state.scrapers.clear()


SCRAPER_STOP_S = 5.0


def _stopping(environment: Environment, **_: Any) -> None:
    state = _state(environment)
    if state.stopping_ns is None:
        state.stopping_ns = time.monotonic_ns()
    if state.run is not None:  # no new session, turn or task; Locust stops the users (each cancels its own work)
        state.run.ctx.stopping = True


def _finish(environment: Environment, **_: Any) -> None:
    """Close this process's shard; the master (or standalone) finalises ``run.json``."""
    state = _state(environment)
    if state.run is not None:
        state.run.close("completed")
    _stop_scrapers(state)
    for ledger in state.ledgers:  # the master's account of the budget (budget-master.json), for run.json
        ledger.write()
    state.ledgers.clear()
    life = state.life
    if life is None or life.manifest.ended_at:
        return
    manifest = life.manifest
    opts: Any = environment.parsed_options
    if manifest.mono_anchor_ns is None:  # the test ended during the idle probes: its clock never started
        _interrupted_in_calibration(environment, life)
        return
    now = time.monotonic_ns()
    anchor = int(manifest.mono_anchor_ns or 0)
    stopped = state.stopping_ns if state.stopping_ns is not None else now
    elapsed = (stopped - anchor) / 1e9
    planned = getattr(opts, "run_time", None)
    # Locust starts a headless run's -t timer before test_start fires (greenlets spawned before the run's own
    # go first: on a busy machine test_start came 2 s after the timer, and a run that reached -t looked cut
    # short). A standalone headless first test is therefore timed from the environment's creation, which the
    # timer follows with no wait in between; a master waits for its workers there, a web-UI test for its user.
    standalone = bool(getattr(opts, "headless", False)) and not getattr(opts, "master", False) and state.tests <= 1
    begun = (state.init_ns if standalone and state.init_ns is not None
             else state.start_ns if state.start_ns is not None else anchor)
    ran_s = (stopped - begun) / 1e9
    # -t reached (or a web-UI run stopped by its user) is the run's planned end; an earlier stop is not
    early = planned is not None and ran_s < float(planned) - 2.0
    # a run whose budget stopped the sending did not measure its plan: say so, as `rushhour run` does
    tail = ShardTail(Path(opts.rh_run_dir))
    tail.poll()
    reason = tail.stop_reason()  # "budget": the budget ended the sending (and then the test), not a stop
    budget = bool(manifest.scenario is not None and manifest.scenario.get("budget"))
    life.finish(reason if reason == "budget" else "interrupted" if early else (reason or "completed"),
                tail.events if budget else None)
    manifest.duration_s = round(elapsed, 3)
    manifest.drain_s = round(max(0.0, (now - anchor) / 1e9 - elapsed), 3)
    if manifest.scenario is not None:
        manifest.scenario["phases"] = [Phase(name=PHASE, duration=max(elapsed, 1e-3)).model_dump(mode="json")]
        manifest.scenario["drain_s"] = manifest.drain_s
    with contextlib.suppress(OSError):
        life.save()
    with contextlib.suppress(OSError):
        os.write(2, f"rushhour: run folder {opts.rh_run_dir} (rushhour audit {opts.rh_run_dir})\n".encode())


def _interrupted_in_calibration(environment: Environment, life: Lifecycle) -> None:
    """run.json of a test stopped before its clock started (nothing measured), one line, and a failing exit."""
    life.finish("interrupted")
    life.manifest.interrupted_during = "calibration"
    run_dir = life.run_dir
    with contextlib.suppress(OSError):
        life.save()
    environment.process_exit_code = 1  # nothing was measured: never a green run
    with contextlib.suppress(OSError):
        os.write(2, ("rushhour: the test ended during its idle probes (calibration), before its clock started: "
                     f"nothing was measured; give -t more than the probes take ({run_dir})\n").encode())


def _late_usage(environment: Environment, **_: Any) -> None:
    """A headless master finalises run.json before its workers stop (Locust quits them after): once their
    shards hold their stop lines (at most ``USAGE_WAIT_S``), their budget use goes into run.json."""
    opts: Any = environment.parsed_options
    life = _state(environment).life
    if life is None or opts is None or not getattr(opts, "master", False):
        return
    manifest = life.manifest
    if manifest.scenario is None or not manifest.scenario.get("budget"):
        return
    run_dir = Path(opts.rh_run_dir)
    deadline = time.monotonic() + USAGE_WAIT_S
    while time.monotonic() < deadline:
        shards, stopped = _stopped_shards(run_dir)
        if shards and stopped >= shards:
            break
        gevent.sleep(0.1)
    manifest.budget_usage = _budget_usage(life)
    with contextlib.suppress(OSError):
        life.save()


USAGE_WAIT_S = 5.0
events.test_stopping.add_listener(_stopping)
events.test_stop.add_listener(_finish)
events.quitting.add_listener(_finish)
events.quitting.add_listener(_late_usage)
