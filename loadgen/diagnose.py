"""``rushhour doctor``'s parent side: write the plan, run the probe child by PID, scrape /metrics once.

The probes themselves run in ``python -m rushhour.loadgen.engine.doctor`` (gevent stays out of this process, as
for the calibration probes); this module only orchestrates, and hands what it collected to
``audit.doctor`` for judgement.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pydantic import ValidationError

from rushhour import stacks
from rushhour.loadgen.scrape import metrics_url, read_credential
from rushhour.loadgen.testbed_proc import child_env, stop_pid
from rushhour.loadgen.tiers import TierError, credential
from rushhour.records.doctor import Collected, Plan
from rushhour.records.record import iter_run
from rushhour.scenarios import ScenarioError, load_scenario
from rushhour.scenarios.model import Scenario
from rushhour.scenarios.names import did_you_mean

PLAN_FILE = "doctor.json"
FILLER_TIER = "doctor-filler"  # the fillers' own tier, halfway between the lowest and highest priority
PROBE_DEADLINE_S = 180.0
DOCTOR_TIMEOUTS = {"connect_s": 5.0, "ttft_s": 30.0, "total_s": 60.0}


class DoctorError(ValueError):
    """The doctor cannot start: a one-line reason (bad scenario, unknown profile, missing credential)."""


def doctor_scenario(url: str, profile: str, model: str, tiers: list[tuple[str, int]] | None = None) -> Scenario:
    """A minimal scenario for the probes when the user names only a target: two tiers, far apart."""
    tiers = tiers or [("doctor-high", 100), ("doctor-low", -1)]
    return Scenario.model_validate(
        {
            "name": "doctor",
            "target": {"url": url, "profile": profile, "model": model},
            "tiers": [{"name": name, "priority": prio} for name, prio in tiers],
            "personas": [{"kind": "chat", "name": "doctor", "tier": tiers[0][0], "arrival": {"rate": 0.1}}],
            "phases": [{"name": "probe", "duration": "1s"}],
            "calibration": {"probes": 0},
        }
    )


def with_doctor_timeouts(scenario: Scenario) -> Scenario:
    """The probes' own deadlines (short: a doctor must answer in a minute or two, not a run's length)."""
    t = scenario.resilience.timeouts.model_copy(update=DOCTOR_TIMEOUTS)
    return scenario.model_copy(update={"resilience": scenario.resilience.model_copy(update={"timeouts": t})})


def with_filler_tier(scenario: Scenario) -> Scenario:
    """The scenario plus the fillers' tier, halfway between its lowest and highest priority (same credential
    as the lowest tier); unchanged when the tiers are too close to have a middle."""
    tiers = sorted(scenario.tiers, key=lambda t: t.priority)
    low, high = tiers[0], tiers[-1]
    if high.priority - low.priority < 2:
        return scenario
    filler = low.model_copy(
        update={
            "name": FILLER_TIER,
            "priority": (low.priority + high.priority) // 2,
            "objective": FILLER_TIER,
            "slo": low.slo,
        }
    )
    return scenario.model_copy(update={"tiers": [*scenario.tiers, filler]})


def new_folder(runs_dir: Path) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = Path(runs_dir) / f"doctor-{stamp}-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=False)
    return folder


def run_probes(
    scenario: Scenario, target: str, folder: Path, fillers: int, deadline_s: float = PROBE_DEADLINE_S
) -> str | None:
    """Run the probe child to completion (or kill it at ``deadline_s``); an error text, or None."""
    plan = {
        "run_id": folder.name,
        "target": target,
        "fillers": fillers,
        "scenario": with_filler_tier(with_doctor_timeouts(scenario)).model_dump(mode="json"),
    }
    (folder / PLAN_FILE).write_text(json.dumps(plan))
    log = folder / "doctor.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rushhour.loadgen.engine.doctor", "--dir", str(folder)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=child_env(),
        )
        started = time.monotonic()
        try:
            proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            stop_pid(proc, 5.0)
            return f"the probes did not finish within {deadline_s:g} s (stopped; see {log})"
        finally:
            if proc.poll() is None:
                stop_pid(proc, 5.0)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return f"the probe process exited {proc.returncode} after {time.monotonic() - started:.1f} s: {tail[0][:200]}"
    return None


def served_models(target: str, key: str | None = None, timeout_s: float = 5.0) -> tuple[list[str], str | None]:
    """The model ids ``GET <target>/v1/models`` lists, or an error text (never raises)."""
    import urllib.error
    import urllib.request

    url = target.rstrip("/") + "/v1/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            body = json.loads(resp.read(1 << 20))
    except urllib.error.HTTPError as exc:
        return [], f"GET {url}: HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return [], f"GET {url}: {exc}"
    data = body.get("data") if isinstance(body, dict) else None
    return [str(m.get("id")) for m in data or [] if isinstance(m, dict) and m.get("id")], None


def scrape_names(
    metrics_url: str | None, token: str | None = None, credential_name: str | None = None, timeout_s: float = 5.0
) -> tuple[set[str], str | None]:
    """The metric family names ``metrics_url`` exposes, or an error text (never raises)."""
    from rushhour.loadgen import scrape

    if metrics_url is None:
        return set(), "no metrics URL (target.metrics is null)"
    try:
        text = scrape.fetch(metrics_url, timeout_s, token=token, credential_name=credential_name)
        return {s.name for s in scrape.parse_metrics_text(text)}, None
    except Exception as exc:  # a doctor reports every failure as a line, whatever it is
        return set(), str(exc) or type(exc).__name__


def collect(
    scenario: Scenario, target: str, runs_dir: Path, fillers: int, metrics_url: str | None, token: str | None = None
) -> Collected:
    """Probe, then scrape once; the folder keeps the probes' shard and log for inspection."""
    folder = new_folder(runs_dir)
    probe_error = run_probes(scenario, target, folder, fillers)
    records = list(iter_run(folder, kind="request"))
    options = scenario.target.metrics
    names, metrics_error = scrape_names(metrics_url, token, options.credential if options else None)
    return Collected(folder, records, names, metrics_error, probe_error)


def prepare(
    scenario_name: str | None, *, target: str | None, profile: str | None, model: str | None, metrics: str | None
) -> Plan:
    """The probe plan from a scenario (overridden by the options) or from ``--target`` and ``--profile`` alone."""
    if profile is not None and profile not in stacks.NAMES:
        near = did_you_mean(profile, stacks.NAMES)
        raise DoctorError(f"unknown profile {profile!r}" + (f": {near}" if near else "")
                          + f" (one of: {', '.join(stacks.NAMES)})")
    try:
        if scenario_name is not None:
            loaded = load_scenario(scenario_name)
            update = {
                "url": target or loaded.target.url,
                "profile": profile or loaded.target.profile,
                "model": model or loaded.target.model,
            }
            loaded = loaded.model_copy(update={"target": loaded.target.model_copy(update=update)})
        elif not target or not profile:
            raise DoctorError("doctor needs a SCENARIO, or --target URL and --profile P")
        else:
            loaded = doctor_scenario(target, profile, model or "")
        if loaded.target.url == "testbed":
            raise DoctorError("doctor probes a running stack: give --target URL (`rushhour serve` runs the testbed)")
        key = credential(loaded.tiers[0])
        options = loaded.target.metrics
        token = read_credential(options.credential) if options is not None and options.credential else None
    except (ScenarioError, TierError, FileNotFoundError) as exc:  # FileNotFoundError: no such scenario
        raise DoctorError(str(exc)) from None
    except ValidationError as exc:  # the options made a scenario that does not validate (e.g. --target ftp://…)
        first = exc.errors()[0]
        names: dict[tuple[int | str, ...], str] = {("target", "url"): "--target", ("target", "model"): "--model"}
        option = names.get(tuple(first["loc"]), "options")
        raise DoctorError(f"{option}: {first['msg'].removeprefix('Value error, ')}") from None
    except ValueError as exc:  # a metrics credential that is malformed or unset
        raise DoctorError(str(exc).splitlines()[0]) from None
    path = stacks.get(loaded.target.profile).metrics.path
    where = metrics or (metrics_url(loaded.target.url, options.url, path) if options is not None else None)
    return Plan(loaded, key, where, token)


def diagnose(plan: Plan, runs_dir: Path, fillers: int) -> Collected:
    """List the models, probe, scrape once; the result carries the judgement's input.

    Raises ``DoctorError`` before any probe when the stack lists its models and the requested one is not among them.
    """
    models, models_error = served_models(plan.url, plan.key)
    scenario = plan.scenario
    if not scenario.target.model and models:  # no model named anywhere: probe what the stack serves first
        scenario = scenario.model_copy(update={"target": scenario.target.model_copy(update={"model": models[0]})})
    if models and scenario.target.model not in models:
        # every probe would be refused for its model, which says nothing of the tiers: say so before sending any
        listed = ", ".join(models[:5]) + (", …" if len(models) > 5 else "")
        raise DoctorError(f"model {scenario.target.model!r} is not served by {plan.url} (served: {listed}): "
                          f"pass --model {models[0]} (or set target.model in the scenario)")
    got = collect(scenario, plan.url, runs_dir, fillers, plan.metrics_url, plan.metrics_token)
    got.scenario, got.models, got.models_error = scenario, models, models_error
    return got
