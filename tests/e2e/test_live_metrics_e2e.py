"""`rushhour run --metrics-port`: the run's own figures, live, as Prometheus text, classified as the audit does."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import REPO, cli_command, cli_env, rushhour

pytestmark = pytest.mark.e2e
BOARD_METRIC = re.compile(r"\b(rushhour_[a-z_]+|vllm:[a-z_]+|llm_d_epp_[a-z_]+)")

# a small llm-d testbed over its head: batch overflows its band (queue_full) while interactive is served
SCENARIO = """
name: e2e-live-metrics
seed: 3
target:
  url: testbed
  profile: llm-d
  model: testbed-model
  testbed: {preset: tiny, replicas: 1, speed: 0.5, config: {band_max_requests: 4}}
calibration: {probes: 0}
tiers:
  - {name: interactive, priority: 10}
  - {name: batch, priority: -1}
personas:
  - {kind: chat, name: chat, tier: interactive, turns: 1, arrival: {process: poisson, rate: 3},
     prompt_tokens: 64, output_tokens: 16}
  - {kind: chat, name: bulk, tier: batch, turns: 1, arrival: {process: poisson, rate: 12},
     prompt_tokens: 64, output_tokens: 120}
phases:
  - {name: peak, duration: 10s}
drain_s: 4
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def _scrape(url: str, declared: set[str] | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    """The endpoint's samples by (name, labels); ``declared`` gets the sample names of every family it declares
    (a labelled counter nothing has counted yet has no sample, but its family is there)."""
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return None
    families = list(text_string_to_metric_families(text))
    if declared is not None:
        declared.update(f.name + suffix for f in families for suffix in SUFFIXES.get(f.type, ("",)))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in families for s in family.samples}


def test_live_figures_grow_with_the_run_and_agree_with_its_audit(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = [*cli_command(), "run", str(scenario), "--out", str(tmp_path / "runs"), "--metrics-port", str(port)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    scrapes = []
    declared: set[str] = set()
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            found = _scrape(url, declared)
            if found is not None:
                scrapes.append(found)
            time.sleep(0.5)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 1), out[-3000:]
    assert f"live metrics: {url}" in out
    assert len(scrapes) >= 5, (len(scrapes), out[-2000:])
    assert _scrape(url) is None  # the endpoint closed with the load

    def attempts(scrape: dict, tier: str, cls: str) -> float:
        return scrape.get(("rushhour_attempts_total", (("class", cls), ("tier", tier))), 0.0)

    served = [attempts(s, "interactive", "served") for s in scrapes]
    assert served == sorted(served) and served[-1] > 0, served  # counters only grow, and did while it ran
    assert any(k[0] == "rushhour_in_flight" for k in scrapes[len(scrapes) // 2])
    assert any(k[0] == "rushhour_ttft_seconds_count" for k in scrapes[-1])

    run_dir = next((tmp_path / "runs").glob("*/run.json")).parent
    assert json.loads((run_dir / "run.json").read_text())["metrics_url"] == url
    summary = json.loads((run_dir / "summary.json").read_text())
    last = scrapes[-1]
    for tier in summary["tiers"]:
        for cls, count in tier["attempts_by_class"].items():
            seen = attempts(last, tier["name"], cls)
            assert seen <= count, (tier["name"], cls, seen, count)  # never more than the audit counts
    batch = {t["name"]: t for t in summary["tiers"]}["batch"]["attempts_by_class"]
    assert batch.get("queue_full", 0) > 0 and attempts(last, "batch", "queue_full") > 0, (batch, last)

    # the Grafana board (deploy/grafana/rushhour.json) queries only names these real processes exposed: the run's
    # live endpoint (its scrapes above) and the testbed's /metrics as llm-d and vLLM name them (the run's scraper
    # kept them in metrics.jsonl)
    exposed = {name for scrape in scrapes for name, _ in scrape} | declared
    exposed |= {sample["name"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                for sample in json.loads(line).get("samples", [])}
    board = json.loads((REPO / "deploy" / "grafana" / "rushhour.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [str(v.get("query", "")) for v in board["templating"]["list"]]
    queried = {m for e in exprs for m in BOARD_METRIC.findall(e)}
    assert len(queried) >= 10 and queried <= exposed, sorted(queried - exposed)


def test_a_busy_metrics_port_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = rushhour("run", str(scenario), "--out", str(tmp_path / "runs"), "--metrics-port", str(port), timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr + done.stdout
    assert f"port {port} is in use: pass --metrics-port N" in done.stderr + done.stdout
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/records"))
