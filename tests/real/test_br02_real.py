"""A two-tier run on the session's real vLLM 0.32, written with ``rushhour report --format br0.2``: the file
llm-d-benchmark's published BR0.2 schema accepts, with vLLM's own token counts in it.

The run is the session's saturating one (conftest ``saturated_vllm_run``, shared with test_vllm_real): two tiers,
the vllm profile, usage on every served answer, and rejections besides, which the report must carry as
failures. A run of its own would cost a vLLM run more and prove no more."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .helpers import ROOT

SCHEMA_COPY = ROOT / "tests" / "fixtures" / "llm_d_benchmark"
BR02_FILE = "benchmark_report_v0.2,_rushhour.yaml"


def test_real_vllm_run_as_br02_validates(saturated_vllm_run: tuple[Any, dict[str, Any], Any]) -> None:
    summary = saturated_vllm_run[1]
    run_dir = Path(str(summary["_run_dir"]))
    done = subprocess.run([sys.executable, "-m", "rushhour.cli", "report", str(run_dir), "--format", "br0.2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    if str(SCHEMA_COPY) not in sys.path:
        sys.path.insert(0, str(SCHEMA_COPY))
    from llmd_br_v0_2 import BenchmarkReportV02  # the published schema, copied unchanged

    report = BenchmarkReportV02.model_validate(yaml.safe_load((run_dir / BR02_FILE).read_text()))
    aggregate = report.results.request_performance.aggregate
    tiers = {t["name"]: t for t in summary["tiers"]}
    served = sum(t["by_class"].get("served", 0) for t in tiers.values())
    assert served > 0, f"vLLM served nothing: {[t['by_class'] for t in tiers.values()]}"
    assert aggregate.requests.total == sum(t["drop_rate"]["n"] for t in tiers.values())
    # vLLM reports usage on every answer: the workload's prompt lengths and the token rates are measured
    load = report.scenario.load
    assert load.standardized.tool == "rushhour" and load.standardized.input_seq_len.value > 0
    assert aggregate.throughput.output_token_rate is not None and aggregate.latency.time_to_first_token.p50 > 0
    extension = report.results.observability.model_extra["rushhour"]
    assert [t["name"] for t in extension["tiers"]] == ["interactive", "batch"]
    assert extension["stack_profile"] == "vllm"
    print(json.dumps({"requests": aggregate.requests.model_dump(exclude_none=True, include={"total", "failures",
                                                                                             "incomplete"}),
                      "ttft_ms": [aggregate.latency.time_to_first_token.p50, aggregate.latency.time_to_first_token.p99],
                      "output_tokens_per_s": aggregate.throughput.output_token_rate.mean}))
