"""``run.json``: the run manifest as one typed record, read and written only through ``RunManifest``.

Standard library only (like ``records.record``), so the audit, the runner and the load processes
share it. ``from_json`` accepts every older ``run.json``: a key it does not know, or a known key
whose value has an unexpected type, is kept in ``extra`` and written back unchanged, and a missing
key takes its default. ``write_manifest`` is the one writer: atomic, so a reader (or a kill) never
sees half a manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

RUN_MANIFEST = "run.json"


STOP_DOOMED = "aborted_doomed"  # every attempt failed alike: stopped by the fail-fast watch (loadgen/doomed.py)


@dataclass
class RunManifest:
    """Everything ``run.json`` says about one run (``None``: not known, or not reached)."""

    run_id: str = ""
    # the scenario as run: the resolved model, dumped (overrides and localised traces applied)
    scenario_name: str = ""
    scenario_source: str = ""
    scenario: dict[str, Any] | None = None
    seed: int | None = None
    target_url: str = ""
    resolved_target_url: str | None = None  # the primary route's URL once a testbed has a port
    profile: str = ""
    model: str = ""
    dialect: str = ""
    duration_s: float | None = None
    drain_s: float | None = None
    # where and how it ran
    mode: str = ""  # "simulated": virtual time against the testbed's model (sim/); "" = real time
    simulation: dict[str, Any] | None = None  # a simulated run's own figures: events, wall seconds, speedup
    processes: int = 0
    # how the load processes ran the wire client's hot path: "compiled (mypyc)", or "interpreted (why)"
    # (loadgen/compiled.py); the same records either way, not the same CPU per event
    code: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    command_line: list[str] = field(default_factory=list)
    hostname: str = ""
    locust_command: list[str] = field(default_factory=list)
    locust_pid: int | None = None
    locust_exit_code: int | None = None
    # the clock: every record's times are ns from this monotonic instant, paired with a wall instant
    mono_anchor_ns: int | None = None
    wall_anchor_ns: int | None = None
    started_at: str = ""
    schedule_starts_at: str | None = None
    ended_at: str | None = None
    # routes and the testbeds this run started (the primary one is also in the flat testbed_* keys)
    route_urls: dict[str, str] = field(default_factory=dict)
    testbeds: dict[str, dict[str, Any]] = field(default_factory=dict)
    testbed_url: str | None = None
    testbed_port: int | None = None
    testbed_pid: int | None = None
    testbed_ledger: str | None = None
    testbed_config: str | None = None
    # idle probes before the anchor: pid, exit_code, seconds, probes, sent, served, gave_up, interrupted
    calibration: dict[str, Any] | None = None
    # how it ended
    # completed, interrupted, budget, startup_error, disk_full, overrun_*, aborted_hopeless_slo, aborted_saturation,
    # aborted_doomed (STOP_DOOMED)
    stop_reason: str | None = None
    # an early abort (audit/early.py): stop_reason, kind, message, at_s, and the tier/check/bound or the signal;
    # a doomed run (loadgen/doomed.py): kind "doomed", status, error, attempts, message, at_s (None: calibration)
    abort: dict[str, Any] | None = None
    error: str | None = None
    interrupted_during: str | None = None
    overrun_killed_after_end_s: float | None = None
    disk_full: dict[str, Any] | None = None  # during, at_s, file, missing
    generator_warning: str | None = None
    shards: list[str] = field(default_factory=list)
    # a multi-host run (rushhour run --expect-workers N): expected, master, joined/finished/missing workers,
    # shards received whole (loadgen/ship.py; the full log is workers.jsonl)
    workers: dict[str, Any] | None = None
    # a budget: every process's share and usage, and their sums (loadgen/ship.py merge_budget_usage)
    budget_usage: dict[str, Any] | None = None
    # the master's transport: authenticated workers and the frames it dropped, by reason and sender (auth-master.json)
    auth: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of other versions, kept as they were

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``run.json``: fields still at their default left out, ``extra`` merged back."""
        out = dict(self.extra)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and value != _DEFAULTS[f.name]:
                out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunManifest:
        """A manifest from a ``run.json`` object of any version (see the module's docstring)."""
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            check = _CHECKS.get(str(key))
            if check is not None and (value is None or check(value)):
                if value is not None:
                    known[str(key)] = value
            else:
                extra[str(key)] = value
        return cls(**known, extra=extra)


def _checker(hint: Any) -> typing.Callable[[Any], bool]:
    """A type test for one field's JSON value (``bool`` is not an int; an int is a float)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        parts = [_checker(a) for a in args]
        return lambda v: any(p(v) for p in parts)
    origin = typing.get_origin(hint) or hint
    if origin is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if origin is float:
        return lambda v: isinstance(v, int | float) and not isinstance(v, bool)
    if origin is list:
        return lambda v: isinstance(v, list)
    if origin is dict:
        return lambda v: isinstance(v, dict)
    return lambda v: isinstance(v, origin)


_DEFAULTS = {f.name: getattr(RunManifest(), f.name) for f in fields(RunManifest)}
_CHECKS = {name: _checker(hint) for name, hint in typing.get_type_hints(RunManifest).items() if name != "extra"}


def write_manifest(run_dir: Path, manifest: RunManifest | Mapping[str, Any]) -> Path:
    """Write ``run.json`` atomically (a reader never sees half a manifest).

    When the write fails (a full disk) the old ``run.json`` stays as it was and no ``run.json.tmp``
    is left behind; the ``OSError`` propagates. A mapping is read as a manifest first.
    """
    if not isinstance(manifest, RunManifest):
        manifest = RunManifest.from_json(manifest)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_MANIFEST
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=True, default=str))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def read_manifest(run_dir: Path) -> RunManifest:
    """``run.json`` of a run folder; ``OSError``/``ValueError`` when it is missing or not a JSON object."""
    try:
        data = json.loads((Path(run_dir) / RUN_MANIFEST).read_text())
    except RecursionError:  # a hostile file nested past the parser's stack: one error like any other bad file
        raise ValueError(f"{Path(run_dir) / RUN_MANIFEST} is nested too deeply to be a run.json") from None
    if not isinstance(data, dict):
        raise ValueError(f"{Path(run_dir) / RUN_MANIFEST} is not a JSON object")
    return RunManifest.from_json(data)


def scenario_of(path: Path) -> dict[str, Any] | None:
    """The resolved scenario inside a ``run.json`` file (what the load processes run)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        return None
    manifest = RunManifest.from_json(data)
    return manifest.scenario if manifest.scenario is not None else data


def versions(*packages: str) -> dict[str, str]:
    """Python's version and each installed package's ("unknown" when not installed), for run.json."""
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {"python": platform.python_version(), **{name: version(name) for name in packages}}
