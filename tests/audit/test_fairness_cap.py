"""The router's per-tenant metrics past llm-d's fairness_id cap: named, never silently partial."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd

from rushhour import stacks
from rushhour.audit.fairness_cap import fairness_cap_finding, label_values
from rushhour.audit.metrics import ServerMetrics, load_metrics
from rushhour.stacks.llmd import FAIRNESS_ID_CAP

LLMD = stacks.get("llm-d").metrics
QUEUE = "llm_d_epp_flow_control_request_queue_duration_seconds_count"


def _metrics(*fairness_ids: str) -> ServerMetrics:
    """A run folder's metrics.jsonl with one scrape of the router's per-tenant family, read as the audit reads it."""
    samples = [{"name": QUEUE, "labels": {"fairness_id": f, "priority": "0"}, "value": 1.0} for f in fairness_ids]
    samples.append({"name": "vllm:num_requests_running", "labels": {"fairness_id": "x"}, "value": 0.0})  # not one
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "metrics.jsonl").write_text(json.dumps({"ts_ns": 1, "samples": samples}) + "\n")
        return load_metrics(Path(folder), 0)


def test_llmd_knows_its_cap() -> None:
    assert (LLMD.fairness_label, LLMD.fairness_cap) == ("fairness_id", FAIRNESS_ID_CAP) == ("fairness_id", 1000)
    assert stacks.get("vllm").metrics.fairness_cap is None


def test_more_tenants_than_the_cap_is_a_warning_scraped_or_not() -> None:
    tenants = {f"t{i}" for i in range(1001)}
    for metrics in (ServerMetrics(samples=pd.DataFrame()), _metrics(*[f"t{i}" for i in range(1000)], "other")):
        found = fairness_cap_finding(tenants, LLMD, metrics)
        assert found is not None and found.kind == "fairness_id_capped" and found.severity == "warning"
        assert "1,001 tenants" in found.message and "at most 1,000 fairness_id values" in found.message
    assert "`other` among them" in found.message and found.data["label_values_seen"] == 1001


def test_the_routers_own_other_series_says_so_under_the_cap_too() -> None:
    """A router configured with a lower cap (or counting tenants rushhour did not send) lumps some: its metrics
    show `other` though no tenant of the run is named so."""
    found = fairness_cap_finding({"a", "b", "c"}, LLMD, _metrics("a", "other"))
    assert found is not None and found.data["other_seen"] is True


def test_under_the_cap_or_a_tenant_named_other_claims_nothing() -> None:
    assert fairness_cap_finding({"a", "b"}, LLMD, _metrics("a", "b")) is None
    assert fairness_cap_finding({"a", "other"}, LLMD, _metrics("a", "other")) is None
    assert fairness_cap_finding({f"t{i}" for i in range(5000)}, stacks.get("vllm").metrics, _metrics()) is None
    assert label_values(_metrics("a"), "fairness_id") == {"a"}
