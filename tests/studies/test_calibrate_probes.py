"""``rushhour calibrate``'s probe design (pure) and its one-line refusals, without a server."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

from support import rushhour

from rushhour.calibrate import decode_probes, heldout, laid_out, prefill_probes, public_url, trace_rows


def test_probes_are_laid_out_alone_and_every_kind_is_held_out_somewhere() -> None:
    probes = laid_out([*prefill_probes(1024, 2, quick=False), *decode_probes(4, 1024, 32, quick=False)], 0.5,
                      {"prefill": 0.5, "decode": 3.0})
    assert all(b.at_s > a.at_s for a, b in itertools.pairwise(probes))
    assert max(p.prompt for p in probes) == 1024 and {p.count for p in probes if p.kind == "decode"} == {1, 2, 3, 4}
    held = heldout(probes)
    assert any(h.startswith("prefill-") for h in held) and any(h.startswith("decode-") for h in held)
    assert not any(h.startswith("warmup") for h in held)
    text, rows = trace_rows(probes)
    assert text.splitlines()[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    assert len(rows) == len(text.splitlines()) - 1 == sum(p.count for p in probes)
    assert rows[0].kind == "warmup" and rows[-1].name == probes[-1].name  # row n of the trace is probe rows[n]


def test_the_decode_ladder_runs_twice_the_second_time_backwards_and_once_when_quick() -> None:
    full = [p.name for p in decode_probes(4, 1024, 32, quick=False)]
    assert len(full) == 24 and full[12:] == full[:12][::-1] and len(set(full)) == 12
    held = heldout(decode_probes(4, 1024, 32, quick=False))  # a probe and its repeat: held out together
    assert all(full.count(name) == 2 for name in held)
    quick = [p.name for p in decode_probes(4, 1024, 32, quick=True)]
    assert len(quick) == len(set(quick)) == 8  # --quick: the ladder once


def test_a_url_is_named_without_its_credentials() -> None:
    assert public_url("http://user:secret@10.0.0.1:8000/v1/?key=abc#x") == "http://10.0.0.1:8000/v1"


def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = rushhour("calibrate", "--target", f"http://127.0.0.1:{port}", "--runs", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "cannot reach the server" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing probed, nothing written


def test_a_front_end_without_a_cpu_counter_is_said_unmeasured() -> None:
    """A server whose /metrics has no process_cpu_seconds_total (or a hostile one): the front end's CPU is said
    unmeasured, never taken as zero cost, and nothing is sent to it beyond the reads."""
    import http.server
    import threading

    from rushhour.front_probe import measure

    posts: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"# TYPE x counter\nprocess_cpu_seconds_total NaN\nvllm:x 1\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            posts.append(self.path)
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        found = measure(f"http://127.0.0.1:{server.server_address[1]}", "tiny", say=lambda _: None)
    finally:
        server.shutdown()
    assert found.cpu_s is None and found.shares_core is None and not posts
    assert "no process_cpu_seconds_total" in found.evidence and "\n" not in found.evidence


def test_the_front_ends_spread_is_its_lone_requests_deciles_in_seconds() -> None:
    from rushhour.calibrate import MIN_SPREAD_SAMPLES, front_end_quantiles_s

    assert front_end_quantiles_s([20.0] * (MIN_SPREAD_SAMPLES - 1)) == []  # too few: the median alone
    gaps = [float(v) for v in range(-1, 20)]  # −1 ms is the clocks' noise: 0
    q = front_end_quantiles_s(gaps)
    assert len(q) == 11 and q[0] == 0.0 and q[-1] == 0.019 and q[5] == 0.009 and q == sorted(q)


def test_the_speed_drift_is_the_ladders_second_pass_against_its_first() -> None:
    from rushhour.calibrate import Probe, speed_drift

    def pair(name: str, at_s: float, itl_ms: float) -> tuple[Probe, dict[str, object]]:
        return Probe(name, "decode", 64, 48, 1, at_s), {"status": 200, "metrics_mean_itl_ms": itl_ms}

    # two probes run twice: 10 % and 30 % slower the second time (median 20 %); one run once and a refused one
    # say nothing
    pairs = [pair("decode-1x64", 1, 4.0), pair("decode-2x64", 2, 5.0), pair("decode-2x64", 2, 5.0),
             pair("decode-3x64", 3, 6.0), pair("decode-2x64", 9, 6.5), pair("decode-1x64", 10, 4.4),
             (Probe("decode-3x64", "decode", 64, 48, 1, 11), {"status": 503})]
    drift = speed_drift(pairs)
    assert drift is not None and abs(drift[0] - 0.2) < 1e-9 and drift[1] == 2
    assert speed_drift(pairs[:4]) is None  # the ladder once (--quick): unmeasured
    from rushhour.reports.calibration import render_calibration

    page = render_calibration({"engine": "vllm 0.32.0", "speed_drift": [-0.197, 12]}, None)
    assert "the decode ladder's second pass ran 20% faster than its first (median over 12 probes" in page
    assert "ran once" in render_calibration({"engine": "vllm 0.32.0", "speed_drift": None}, None)
