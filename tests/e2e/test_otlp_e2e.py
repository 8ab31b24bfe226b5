"""`rushhour run --otlp-endpoint`: one span per attempt to a real OTLP/HTTP receiver on loopback, joined to the
testbed's traces by the traceparent, classified as the audit classifies; a dead collector costs the run nothing."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support import run, rushhour

from rushhour.audit.ledger import LEDGER_FILE
from rushhour.audit.table import ATTEMPTS_FILE
from rushhour.records.reader import iter_run

from .otlp_receiver import attributes, otlp_receiver

pytestmark = pytest.mark.e2e

# a small llm-d testbed over its head: batch overflows its band (queue_full) while interactive is served
SCENARIO = """
name: e2e-otlp
seed: 5
target:
  url: testbed
  profile: llm-d
  model: testbed-model
  testbed: {preset: tiny, replicas: 1, speed: 0.5, config: {band_max_requests: 3}}
calibration: {probes: 0}
tiers:
  - {name: interactive, priority: 10}
  - {name: batch, priority: -1}
personas:
  - {kind: chat, name: chat, tier: interactive, turns: 1, arrival: {process: poisson, rate: 3},
     prompt_tokens: 64, output_tokens: 16}
  - {kind: chat, name: bulk, tier: batch, turns: 1, arrival: {process: poisson, rate: 10},
     prompt_tokens: 64, output_tokens: 120}
phases:
  - {name: peak, duration: 5s}
drain_s: 3
"""


def _sent(run_dir: Path) -> dict[str, dict]:
    return {r["request_id"]: r for r in iter_run(run_dir, "request") if not r.get("not_sent")}


def test_one_span_per_attempt_joins_the_ledger_and_carries_the_audits_class(tmp_path: Path) -> None:
    with otlp_receiver() as got:
        done, run_dir, _ = run(SCENARIO, tmp_path, "--otlp-endpoint", got.url)
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out[-3000:]
    records = _sent(run_dir)
    spans = {format(s.span_id, "016x") if isinstance(s.span_id, int) else s.span_id.hex(): s for s in got.spans}
    assert len(got.spans) == len(spans) == len(records) > 0, (len(got.spans), len(records), out[-2000:])
    said = json.loads((run_dir / "run.json").read_text())["otlp"]
    assert said["spans"] == said["exported"] == len(records) and said["lost"] == 0 and said["error"] is None, said
    assert f"OTLP export: {len(records)} spans sent" in out

    ledger = {row["request_id"]: row for row in map(json.loads, (run_dir / LEDGER_FILE).read_text().splitlines())}
    table = pq.read_table(run_dir / ATTEMPTS_FILE, columns=["request_id", "class"]).to_pylist()
    audit_class = {row["request_id"]: row["class"] for row in table}
    classes, joined = set(), 0
    for request_id, rec in records.items():
        span = spans[request_id[:16]]
        attrs = attributes(span.attributes)
        assert span.trace_id.hex() == rec["logical_id"], (span.trace_id.hex(), rec["logical_id"])
        if request_id in ledger and ledger[request_id].get("traceparent"):  # what the testbed saw on the wire
            _, trace, parent, _ = ledger[request_id]["traceparent"].split("-")
            assert (trace, parent) == (span.trace_id.hex(), span.span_id.hex()), (ledger[request_id], attrs)
            joined += 1
        assert attrs["rushhour.tier"] == rec["tier"] and attrs["rushhour.persona"] == rec["persona"], attrs
        assert attrs["rushhour.class"] == audit_class[request_id], (attrs, audit_class[request_id])
        classes.add(attrs["rushhour.class"])
        assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
        if attrs["rushhour.class"] == "served":
            assert attrs["rushhour.ttft_s"] > 0 and attrs["rushhour.e2e_s"] >= attrs["rushhour.ttft_s"], attrs
            assert attrs["http.response.status_code"] == 200 and attrs["gen_ai.usage.output_tokens"] > 0, attrs
            assert "rushhour.gateway_queue_ms" in attrs, attrs  # the testbed's gateway queue header
    assert joined > len(records) // 2 and {"served", "queue_full"} <= classes, (joined, classes)
    assert all(r.get("rushhour.run_id") == run_dir.name and r.get("service.name") == "rushhour"
               for r in got.resources), got.resources[:1]
    # no header travels: nothing that looks like a key or an authorization in any attribute
    flat = json.dumps([attributes(s.attributes) for s in got.spans]).lower()
    assert "authorization" not in flat and "api-key" not in flat and "bearer" not in flat

    # the metrics: attempts by tier and the audit's class (their last export equals the span count), TTFT
    last: dict[str, object] = {m.name: m for m in got.metrics}
    assert {"rushhour.attempts", "rushhour.ttft"} <= set(last), sorted(last)
    counted = sum(p.as_int for p in last["rushhour.attempts"].sum.data_points)  # type: ignore[attr-defined]
    control = sum(1 for r in records.values() if r.get("control") or r.get("twin_of"))
    assert counted == len(records) - control, (counted, len(records), control)
    ttft_points = last["rushhour.ttft"].histogram.data_points  # type: ignore[attr-defined]
    assert sum(p.count for p in ttft_points) == sum(a["rushhour.class"] == "served" for a in
                                                    (attributes(s.attributes) for s in got.spans))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_dead_collector_is_a_warning_and_the_run_is_whole(tmp_path: Path) -> None:
    done, run_dir, _ = run(SCENARIO, tmp_path, "--otlp-endpoint", f"http://127.0.0.1:{_closed_port()}",
                           "--no-report")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "Traceback" not in out and "Failed to export" not in out  # one line of ours, not the SDK's log
    said = json.loads((run_dir / "run.json").read_text())["otlp"]
    records = _sent(run_dir)
    assert said["spans"] == len(records) > 0 and said["exported"] == 0 and said["lost"] == len(records), said
    assert said["error"], said
    assert "warning:" in out and "OTLP export: 0 of" in out and "the run and its records are whole" in out, out[-2000:]


def test_otlp_without_the_extra_is_one_line_before_the_load(tmp_path: Path) -> None:
    """Without the SDK installed (hidden from this interpreter) the flag fails in one line and nothing runs."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    (tmp_path / "inject").mkdir()  # the child's start-up hides the package, as if it were not installed
    (tmp_path / "inject" / "sitecustomize.py").write_text("import sys\nsys.modules['opentelemetry'] = None\n")
    done = rushhour("run", scenario, "--out", tmp_path / "runs", "--otlp", inject=tmp_path / "inject", timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in out, out
    assert "pip install 'rushhour[otel]'" in out and len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "runs").exists()
