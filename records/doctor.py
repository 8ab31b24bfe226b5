"""What `rushhour doctor`'s probes leave for its judgement: the plan probed and what they collected."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rushhour.scenarios.model import Scenario


@dataclass
class Plan:
    """What to probe: the scenario (its target, profile, model and tiers), the key and the metrics endpoint."""

    scenario: Scenario
    key: str | None
    metrics_url: str | None
    metrics_token: str | None

    @property
    def url(self) -> str:
        return self.scenario.target.url

    @property
    def profile(self) -> str:
        return self.scenario.target.profile


@dataclass
class Collected:
    """What the probes and the scrape left: records, and the metric names /metrics exposed."""

    folder: Path
    records: list[dict[str, Any]]
    metric_names: set[str] = field(default_factory=set)
    metrics_error: str | None = None
    probe_error: str | None = None
    scenario: Scenario | None = None  # as probed (the model filled in from /v1/models when none was named)
    models: list[str] = field(default_factory=list)
    models_error: str | None = None
