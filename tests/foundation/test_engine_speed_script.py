"""benchmarks/engine_speed.py: the drift counts, and one probe against a streaming server on loopback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.scripts import load_script

speed = load_script("benchmarks/engine_speed.py")

GAP_S = 0.004  # between the fake engine's tokens


class _Stream(BaseHTTPRequestHandler):
    """A completions stream: one event per token, GAP_S apart; a request for another model gets a 404."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if body["model"] != "tiny":
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for _ in range(body["max_tokens"]):
            self.wfile.write(b'data: {"choices":[{"index":0,"text":"x"}]}\n\n')
            self.wfile.flush()
            time.sleep(GAP_S)
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Stream)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_probe_measures_the_gap_between_streamed_tokens(server: str) -> None:
    ms = speed.probe(server, "tiny")
    assert ms is not None and GAP_S * 1000 <= ms < GAP_S * 1000 * 5  # sleep overshoots on a busy machine, never under
    assert speed.probe(server, "other") is None  # a refusal is no measurement


def test_pairs_a_lag_apart_count_a_step_beyond_the_tolerance() -> None:
    series = [(i * 10.0, 4.0 if i < 30 else 4.8) for i in range(60)]  # +20 % from the 5th minute on
    assert speed.lag_changes(series, 60, 10) == (54, 6)  # only the 6 pairs straddling the step
    assert speed.lag_changes(series, 300, 10) == (30, 30)
    steady = [(i * 10.0, 4.0 * (1.1 if i % 2 else 1.0)) for i in range(60)]  # ±10 %: inside 15 %
    assert speed.lag_changes(steady, 60, 10)[1] == 0


def test_minute_medians_leave_out_thin_minutes_and_one_disturbed_probe() -> None:
    series = [(0.0, 4.0), (10.0, 9.0), (20.0, 4.1), (60.0, 5.0), (70.0, 5.0)]  # minute 1 has 2 probes
    assert speed.minute_medians(series) == [(0.0, 4.1)]
    kept = speed.summary([(i * 10.0, 4.0 if i < 30 else 4.8) for i in range(60)], 10.0)
    assert kept["lags"][5]["minutes"] == {"pairs": 5, "over_tolerance": 5}
