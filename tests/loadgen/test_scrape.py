"""Metrics scraper against a tiny local server that is valid, slow, missing or garbage; bounded."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rushhour.loadgen.scrape import (
    DEFAULT_PREFIXES,
    MetricsScraper,
    ScrapeError,
    fetch,
    metrics_url,
    parse_metrics_text,
)
from rushhour.records.record import Anchor

ROOT = Path(__file__).resolve().parents[2]

METRICS = """\
# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.75
# TYPE llm_d_epp_flow_control_requests_total counter
llm_d_epp_flow_control_requests_total{priority="-1",outcome="RejectedCapacity",inference_pool="p"} 12
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="1.0"} 4
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 5
vllm:e2e_request_latency_seconds_sum 3.5
vllm:e2e_request_latency_seconds_count 5
# TYPE smg_scheduler_admit_total counter
smg_scheduler_admit_total{class="bulk",outcome="preempted"} 2
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.5
# TYPE sglang:weird gauge
sglang:weird NaN
"""


class Handler(BaseHTTPRequestHandler):
    mode = "valid"

    def do_GET(self) -> None:
        mode = type(self).mode
        if mode == "404":
            self.send_error(404, "Not Found")
            return
        if mode == "slow":
            time.sleep(0.6)
        body = (METRICS if mode != "garbage" else "<html><body>nope</body></html>\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[tuple[str, type[Handler]]]:
    handler = type("H", (Handler,), {"mode": "valid"})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", handler
    finally:
        srv.shutdown()
        srv.server_close()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_parse_metrics_text_filters_families() -> None:
    samples = parse_metrics_text(METRICS, DEFAULT_PREFIXES)
    names = {s.name for s in samples}
    assert "process_cpu_seconds_total" not in names
    assert {
        "vllm:num_requests_waiting",
        "llm_d_epp_flow_control_requests_total",
        "vllm:e2e_request_latency_seconds_bucket",
        "smg_scheduler_admit_total",
    } <= names
    by = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}
    assert (
        by[
            (
                "llm_d_epp_flow_control_requests_total",
                (("inference_pool", "p"), ("outcome", "RejectedCapacity"), ("priority", "-1")),
            )
        ]
        == 12
    )
    assert len(parse_metrics_text(METRICS, None)) == len(samples) + 1
    nan = next(s for s in samples if s.name == "sglang:weird")
    assert nan.to_json()["value"] is None
    with pytest.raises(ValueError):
        parse_metrics_text("<html>garbage</html>")


def test_scraper_valid_endpoint(server: tuple[str, type[Handler]], tmp_path: Path) -> None:
    url, _ = server
    out = tmp_path / "metrics.jsonl"
    anchor = Anchor.now()
    scraper = MetricsScraper(url, 0.05, 0.5, out, anchor, max_scrapes=3)
    scraper.start()
    assert scraper.wait(5)
    scraper.stop()
    got = lines(out)
    assert len(got) == 3 and all("samples" in g for g in got)
    assert got[0]["ts_ns"] >= 0 and got[0]["ts_ns"] < got[-1]["ts_ns"] < anchor.since()
    first = {s["name"] for s in got[0]["samples"]}
    assert "vllm:kv_cache_usage_perc" in first and "process_cpu_seconds_total" not in first
    json.loads(out.read_text().splitlines()[0])  # NaN written as null: strict JSON


@pytest.mark.parametrize(("mode", "error"), [("404", "http 404"), ("slow", "timeout"), ("garbage", "unparseable")])
def test_scraper_records_errors_and_backs_off(
    server: tuple[str, type[Handler]], tmp_path: Path, mode: str, error: str
) -> None:
    url, handler = server
    handler.mode = mode
    out = tmp_path / "metrics.jsonl"
    scraper = MetricsScraper(url, 0.02, 0.2, out, Anchor.now(), max_scrapes=2)
    t0 = time.monotonic()
    scraper.run()
    elapsed = time.monotonic() - t0
    got = lines(out)
    assert len(got) == 2 and all(error in g["error"] for g in got), got
    assert all(g["dur_ns"] < 0.5e9 for g in got)  # the hard deadline held
    assert scraper.consecutive_errors == 2 and scraper.next_delay() == pytest.approx(0.08)
    assert elapsed < 10.0  # ~0.1 s idle; generous for a busy machine (a hang would be the 0.2 s deadline × ∞)


def test_backoff_resets_after_a_good_scrape(server: tuple[str, type[Handler]], tmp_path: Path) -> None:
    url, handler = server
    handler.mode = "404"
    scraper = MetricsScraper(url, 0.01, 0.2, tmp_path / "m.jsonl", Anchor.now(), max_backoff_s=0.05)
    for _ in range(5):
        scraper.scrape_once()
    assert scraper.next_delay() == 0.05  # capped
    handler.mode = "valid"
    assert "samples" in scraper.scrape_once()
    assert scraper.next_delay() == 0.01


def test_refused_connection_is_an_error_line(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(ScrapeError):
        fetch(f"http://127.0.0.1:{port}/metrics", 0.5)
    out = tmp_path / "m.jsonl"
    MetricsScraper(f"http://127.0.0.1:{port}/metrics", 0.01, 0.2, out, Anchor.now(), max_scrapes=1).run()
    assert "error" in lines(out)[0]


def test_stop_is_prompt_while_backing_off(server: tuple[str, type[Handler]], tmp_path: Path) -> None:
    url, handler = server
    handler.mode = "404"
    scraper = MetricsScraper(url, 5.0, 0.2, tmp_path / "m.jsonl", Anchor.now()).start()
    time.sleep(0.1)
    t0 = time.monotonic()
    scraper.stop()
    # prompt = well within the 5 s backoff it was sleeping in (a ratio, not a wall-clock window)
    assert not scraper.running and time.monotonic() - t0 < 0.5 * 5.0



def test_stop_takes_the_final_counters_while_backing_off(server: tuple[str, type[Handler]], tmp_path: Path) -> None:
    """A target too busy to answer during the load (seen: LiteLLM, backed off to one try in 16 s) is scraped
    once more at the stop, so the run's cross-check has counters from after the load."""
    url, handler = server
    handler.mode = "404"
    out = tmp_path / "m.jsonl"
    scraper = MetricsScraper(url, 5.0, 0.2, out, Anchor.now()).start()
    time.sleep(0.1)
    handler.mode = "valid"  # the load is over: it answers again, but the next try is 10 s away
    scraper.stop()
    written = lines(out)
    assert "error" in written[0] and len(written) == 2
    assert written[-1]["samples"], written[-1]

def test_metrics_url() -> None:
    assert metrics_url("http://h:8000/", "auto") == "http://h:8000/metrics"
    assert metrics_url("http://h", None) is None
    assert metrics_url("http://h", "http://m:9090/metrics") == "http://m:9090/metrics"


def test_module_cli_runs_as_its_own_process(server: tuple[str, type[Handler]], tmp_path: Path) -> None:
    url, _ = server
    out = tmp_path / "cli.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "rushhour.loadgen.scrape", url, str(out), "--interval-s", "0.01", "--max-scrapes", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(lines(out)) == 2
