"""One run's lifecycle, the same for both Locust entry points: calibrate → anchor → scraper → finish ``run.json``.

``rushhour run`` (``loadgen/runner.py``, in the CLI) and a user's ``locust -f`` (``loadgen/engine/users.py``, in
Locust's master or only process) call these steps, in this order, on the run's ``run.json``. What differs between
them is passed in, never copied: who sends the idle probes (a child process of the CLI, or the Locust process
itself), where the anchor comes from (Locust's master at its test start, or the process that starts the test), and
who scrapes ``/metrics`` (a thread of the CLI, or a child of the Locust process, whose users' gevent loop must not
parse it). Parent side: no gevent, no locust (the child may import it; the runner must).
"""

from __future__ import annotations

import datetime as dt
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rushhour import stacks
from rushhour.loadgen.compiled import wire_status
from rushhour.loadgen.probes import probe_plan
from rushhour.loadgen.ship import merge_budget_usage, read_master_account
from rushhour.records.manifest import RunManifest, versions, write_manifest
from rushhour.records.record import Anchor, shard_paths
from rushhour.scenarios.model import MetricsOptions, Scenario

T = TypeVar("T")


def iso(ns: int | None = None) -> str:
    """A wall-clock time (now, or ``ns`` since the epoch) as run.json writes it: UTC, milliseconds, ``Z``."""
    ts = (ns if ns is not None else time.time_ns()) / 1e9
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_manifest(run_id: str, scenario: Scenario, source: str, target_url: str, **fields: Any) -> RunManifest:
    """run.json as a run starts: the scenario and where it goes, the versions, this command line and host;
    ``fields``: what the entry point adds (its processes, planned duration, …)."""
    return RunManifest(
        run_id=run_id, scenario_name=scenario.name, scenario_source=source,
        scenario=scenario.model_dump(mode="json"), seed=scenario.seed, target_url=target_url,
        profile=scenario.target.profile, model=scenario.target.model, dialect=scenario.target.dialect,
        versions=versions("locust", "rushhour", "gevent"), code=wire_status(), command_line=list(sys.argv),
        hostname=socket.gethostname(), started_at=iso(), **fields,
    )


@dataclass(frozen=True)
class Scrape:
    """What the scraper step hands its starter: the endpoint, the stack profile, the scenario's options, the file."""

    url: str
    profile: str
    options: MetricsOptions
    path: Path


@dataclass
class Lifecycle:
    """One run's steps on its ``run.json`` (``manifest``, in ``run_dir``), called in order by either entry point."""

    run_dir: Path
    manifest: RunManifest

    def save(self) -> None:
        """Write ``run.json`` as it stands now (atomically)."""
        write_manifest(self.run_dir, self.manifest)

    def calibrate(self, scenario: Scenario, send: Callable[[list[int]], dict[str, Any] | None]
                  ) -> dict[str, Any] | None:
        """Step 1, before the anchor: ``send(sizes)`` sends the scenario's idle probes (their prompt sizes, in order)
        and returns their account, run.json's ``calibration`` (None, and nothing sent, when the scenario plans none).
        The caller saves."""
        sizes = probe_plan(scenario)
        if not sizes:
            return None
        self.manifest.calibration = send(sizes)
        return self.manifest.calibration

    def anchor(self, anchor: Anchor, *, starts_run: bool = False) -> None:
        """Step 2: the run's t = 0 in run.json (the schedule starts there; ``starts_run``: so does the run, as in a
        locustfile's test, whose probes come before its start), saved."""
        manifest = self.manifest
        manifest.mono_anchor_ns, manifest.wall_anchor_ns = anchor.mono_ns, anchor.wall_ns
        manifest.schedule_starts_at = iso(anchor.wall_ns)
        if starts_run:
            manifest.started_at = manifest.schedule_starts_at
        self.save()

    def scraper(self, scenario: Scenario, target_url: str, start: Callable[[Scrape], T]) -> T | None:
        """Step 3, from the anchor on: the target's ``/metrics`` into ``metrics.jsonl``, by ``start`` (its handle);
        None when the scenario scrapes nothing or its profile has no endpoint to scrape."""
        from rushhour.loadgen.scrape import METRICS_FILE, metrics_url  # its parser loads only for a run that scrapes

        options = scenario.target.metrics
        if options is None:
            return None
        profile = stacks.get(scenario.target.profile)
        url = metrics_url(target_url, options.url, profile.metrics.path)
        if url is None:
            return None
        return start(Scrape(url, profile.name, options, self.run_dir / METRICS_FILE))

    def finish(self, stop_reason: str, budget_events: list[dict[str, Any]] | None = None) -> None:
        """Step 4: how the run ended, when, and the shards it left in run.json; with ``budget_events`` (the shards'
        events) the budget's use too, with the master's account when it leased it. The caller adds its own facts
        and saves."""
        manifest = self.manifest
        manifest.stop_reason, manifest.ended_at = stop_reason, iso()
        manifest.shards = [p.name for p in shard_paths(self.run_dir)]
        if budget_events is not None:
            manifest.budget_usage = self.budget_usage(budget_events)

    def budget_usage(self, events: list[dict[str, Any]]) -> dict[str, Any] | None:
        """run.json's ``budget_usage``: the shards' ``budget_usage`` events and the master's account, merged."""
        return merge_budget_usage(events, read_master_account(self.run_dir))
