"""The audit is the only reader of records: compare and drops.csv read its attempts table, and agree with it."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import numpy as np
import pytest

from rushhour import audit
from rushhour.audit.summary import OUTCOME_CLASSES, Summary


def _testbed_run(tmp_path: Path) -> Path:
    """A short real run against the embedded testbed, with calibration probes on and a drain for stragglers."""
    from rushhour.loadgen.runner import RunOptions, run_scenario
    from rushhour.scenarios import load_scenario
    from rushhour.scenarios.model import Scenario
    from rushhour.studies.sweep import write_scenario

    data = load_scenario("sweep-tiers").model_dump(mode="json", by_alias=True)
    data["target"]["testbed"].update(replicas=2, speed=1.0)
    data["phases"] = [{"name": "steady", "duration": 6, "rate_scale": 2.0}]
    data["calibration"] = {"probes": 4, "prompt_tokens": [256]}
    data["drain_s"] = 10
    path = write_scenario(Scenario.model_validate(data), tmp_path / "one-reader.yaml")
    result = run_scenario(str(path), RunOptions(out_dir=tmp_path / "runs", seed=3, live=False))
    assert result.run_dir is not None
    return result.run_dir


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary]:
    run_dir = _testbed_run(tmp_path_factory.mktemp("one-reader"))
    return run_dir, audit.run_audit(run_dir)


@pytest.mark.e2e
def test_compare_and_the_audit_agree_on_served_latencies(audited: tuple[Path, Summary]) -> None:
    from rushhour.studies.compare import load_run

    run_dir, summary = audited
    table = audit.attempts(run_dir)
    probes = table[table["probe"].to_numpy()]
    assert len(probes) == 4 and set(probes["tier"].astype(str)) == {summary.tiers[0].name}  # probes on, in tier 1
    _, samples = load_run(run_dir)
    for tier in summary.tiers:
        served = tier.by_class["served"]
        assert served > 0, tier.name
        got = samples[tier.name]
        assert len(got.e2e_ms) == tier.latency.e2e_ms.n == served, tier.name  # probes are not tier latencies
        for q, name in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            assert np.quantile(got.e2e_ms, q) == pytest.approx(getattr(tier.latency.e2e_ms, name)), (tier.name, q)
        ttft = tier.latency.ttft_ms
        if not ttft.censored and not tier.by_class["unfinished"]:  # the audit's TTFT is then served-only too
            assert len(got.ttft_ms) == ttft.n
            for q, name in ((0.5, "p50"), (0.99, "p99")):
                assert np.quantile(got.ttft_ms, q) == pytest.approx(getattr(ttft, name)), (tier.name, q)


@pytest.mark.e2e
def test_drops_csv_speaks_the_audits_classes(audited: tuple[Path, Summary]) -> None:
    from rushhour.reports import drops

    run_dir, summary = audited
    rows = list(csv.DictReader(io.StringIO(drops.render_csv(drops.drop_rows(summary, audit.report_table(run_dir))))))
    assert {r["outcome"] for r in rows} <= set(OUTCOME_CLASSES) - {"served"}
    assert len(rows) == sum(t.attempts - t.attempts_by_class.get("served", 0) for t in summary.tiers)


@pytest.mark.e2e
def test_table_is_reused_and_a_grown_shard_is_stale(audited: tuple[Path, Summary]) -> None:
    run_dir, summary = audited
    started = time.perf_counter()
    again = audit.current_summary(run_dir)
    assert again is not None and again.run.run_id == summary.run.run_id
    assert time.perf_counter() - started < 5.0  # a fingerprint, not a re-audit (generous: a busy machine)
    shard = sorted((run_dir / "records").glob("*.jsonl"))[0]
    stamp = (run_dir / "attempts.parquet").stat().st_mtime_ns
    with shard.open("ab") as handle:
        handle.write(b"\n")  # any change to a shard: size and tail differ
    assert audit.current_summary(run_dir) is None
    table = audit.attempts(run_dir)  # re-audits first
    assert (run_dir / "attempts.parquet").stat().st_mtime_ns != stamp and len(table) > 0
    assert audit.current_summary(run_dir) is not None
