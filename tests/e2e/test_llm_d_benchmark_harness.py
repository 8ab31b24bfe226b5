"""deploy/llm-d-benchmark: the harness script run the way llm-d-benchmark runs a harness pod (its environment
variables, its rendered profile under profiles/rushhour/), against a testbed on loopback: it leaves a BR0.2 report
the published schema accepts, named as llm-d-benchmark's analysis looks for it, and its run_metadata.yaml."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from support import cli_command, cli_env

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "deploy" / "llm-d-benchmark" / "workload"
SCHEMA_COPY = REPO / "tests" / "fixtures" / "llm_d_benchmark"


def render_profile(text: str, env_map: dict[str, str]) -> str:
    """llm-d-benchmark's profile rendering (llmdbenchmark/utilities/profile_renderer.py render_profile)."""
    return re.sub(r"REPLACE_ENV_(\w+)", lambda m: env_map.get(m.group(1), m.group(0)), text)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.skipif(shutil.which("bash") is None, reason="the harness is a bash script")
def test_harness_leaves_a_br02_report_where_llm_d_benchmark_looks(tmp_path: Path) -> None:
    port = free_port()
    # the default preset (H100-class replicas): the profile's peak queues nowhere, so its drain ends at once
    serve = subprocess.Popen([*cli_command(), "serve", "--port", str(port)], cwd=REPO, env=cli_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # the testbed answers once it listens (a busy machine starts Python slowly)
            assert serve.poll() is None, "the testbed exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the testbed did not answer"
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}/v1"  # as llm-d-benchmark may hand it over: the script strips /v1
        workspace, results = tmp_path / "workspace", tmp_path / "results" / "rushhour_exp_1"
        (workspace / "profiles" / "rushhour").mkdir(parents=True)
        template = (HARNESS / "profiles" / "rushhour" / "priority_tiers.yaml.in").read_text()
        rendered = render_profile(template, {"LLMDBENCH_HARNESS_STACK_ENDPOINT_URL": endpoint,
                                             "LLMDBENCH_DEPLOY_CURRENT_MODEL": "testbed"})
        assert "REPLACE_ENV_LLMDBENCH" not in rendered and "drain_s: 30\n" in rendered
        # a short test: a drain lasts its whole span, and the idle probes are not what is tested here
        rendered = rendered.replace("drain_s: 30\n", "drain_s: 1\ncalibration: {probes: 0}\n")
        (workspace / "profiles" / "rushhour" / "priority_tiers.yaml").write_text(rendered)
        experiment = "rushhour-1765000000-ab12"
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONPATH": str(REPO), "LLMDBENCH_RUN_EXPERIMENT_RESULTS_DIR": str(results),
               "LLMDBENCH_RUN_WORKSPACE_DIR": str(workspace),
               "LLMDBENCH_RUN_EXPERIMENT_HARNESS_WORKLOAD_NAME": "priority_tiers",
               "LLMDBENCH_HARNESS_STACK_ENDPOINT_URL": endpoint, "LLMDBENCH_RUN_EXPERIMENT_ID": experiment,
               "LLMDBENCH_DEPLOY_CURRENT_MODEL": "testbed", "RUSHHOUR_ARGS": "--duration 5s"}
        done = subprocess.run(["bash", str(HARNESS / "harnesses" / "rushhour-llm-d-benchmark.sh")], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300, check=False)
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=30)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # llm-d-benchmark's analysis and cross-treatment summary glob benchmark_report_v0.2,_*.yaml in the results folder
    reports = sorted(results.glob("benchmark_report_v0.2,_*.yaml"))
    assert [p.name for p in reports] == ["benchmark_report_v0.2,_rushhour.yaml"]
    if str(SCHEMA_COPY) not in sys.path:
        sys.path.insert(0, str(SCHEMA_COPY))
    from llmd_br_v0_2 import BenchmarkReportV02  # the published schema, copied unchanged

    report = BenchmarkReportV02.model_validate(yaml.safe_load(reports[0].read_text()))
    assert report.run.eid == str(uuid.uuid5(uuid.NAMESPACE_URL, experiment))
    assert report.results.request_performance.aggregate.requests.total > 0
    extension = report.results.observability.model_extra["rushhour"]
    assert [t["name"] for t in extension["tiers"]] == ["interactive", "standard", "batch"]
    metadata = yaml.safe_load((results / "run_metadata.yaml").read_text())
    assert metadata["harness_name"] == "rushhour" and metadata["harness_rc"] == "0"
    assert metadata["experiment_id"] == experiment and metadata["harness_delta"].startswith("PT")
    assert (results / "stdout.log").stat().st_size > 0
