"""How steady is the engine's own speed on this host? One lone request at a fixed interval, for minutes.

    .venv/bin/python benchmarks/engine_speed.py [--url URL [--model NAME]] [--minutes 10] [--every 10] [--json OUT]

Starts vLLM 0.32 (engines/serve.py: the tiny random-weight Llama on one CPU core) unless ``--url`` names a running
one, then every ``--every`` seconds sends the same request alone: 64 prompt tokens (token ids, so any vocabulary
over 164 takes them), 64 output tokens (ignore_eos), streamed to ``/v1/completions``. Each one's mean inter-token
time (first token to last, over the tokens between) is the engine's decode step at batch 1, with nothing else
running on it. A calibration is such measurements taken minutes before the run
it predicts, so the spread of this series over a few minutes bounds how near any prediction from it can come,
whatever the model: it prints the series' quantiles, and for each lag (1, 2, 5 minutes) the share of pairs that far
apart whose speeds differ by more than 15 % (the p50 tolerance of docs/capacity.md's calibration targets), both
probe by probe and between minutes (each minute's median probe, so that one disturbed probe does not count).

    .venv/bin/python benchmarks/engine_speed.py --tables OUT.json   # the summary of a kept series again
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
PROMPT_TOKENS = 64
OUTPUT_TOKENS = 64
TOLERANCE = 0.15


def _serve() -> Any:
    spec = importlib.util.spec_from_file_location("rushhour_engines_serve", ROOT / "engines" / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def probe(url: str, model: str) -> float | None:
    """One lone streamed request; its mean inter-token time in ms (None when it did not stream every token)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
    body = json.dumps({"model": model, "prompt": [1] + [100 + i for i in range(PROMPT_TOKENS - 1)],
                       "max_tokens": OUTPUT_TOKENS, "min_tokens": OUTPUT_TOKENS, "ignore_eos": True,
                       "temperature": 0, "stream": True})
    conn.request("POST", "/v1/completions", body=body, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    stamps: list[float] = []
    try:
        if resp.status != 200:
            return None
        for raw in resp:
            line = raw.strip()
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                if event.get("choices") and event["choices"][0].get("text") is not None:
                    stamps.append(time.perf_counter())
    finally:
        conn.close()
    if len(stamps) < OUTPUT_TOKENS // 2:
        return None
    return (stamps[-1] - stamps[0]) * 1000 / (len(stamps) - 1)


def lag_changes(series: list[tuple[float, float]], lag_s: float, every_s: float) -> tuple[int, int]:
    """(pairs about ``lag_s`` apart, of which differ by more than TOLERANCE): the later over the earlier, less 1."""
    pairs = over = 0
    for i, (t0, v0) in enumerate(series):
        for t1, v1 in series[i + 1:]:
            if abs((t1 - t0) - lag_s) <= every_s / 2:
                pairs += 1
                over += abs(v1 / v0 - 1) > TOLERANCE
    return pairs, over


def minute_medians(series: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Each whole minute's median probe, at the minute's start (a minute with fewer than 3 probes is left out)."""
    minutes: dict[int, list[float]] = {}
    for at, ms in series:
        minutes.setdefault(int(at // 60), []).append(ms)
    return [(m * 60.0, statistics.median(v)) for m, v in sorted(minutes.items()) if len(v) >= 3]


def summary(series: list[tuple[float, float]], every_s: float) -> dict[str, Any]:
    """The series' quantiles, and per lag how many pairs differ by more than TOLERANCE (probes, minutes); printed."""
    values = sorted(v for _, v in series)
    q = statistics.quantiles(values, n=10)
    span = (series[-1][0] - series[0][0]) / 60
    print(f"{len(values)} probes over {span:.1f} min: median {statistics.median(values):.2f} ms a token, "
          f"min {values[0]:.2f}, p10 {q[0]:.2f}, p90 {q[-1]:.2f}, max {values[-1]:.2f} "
          f"(max/min {values[-1] / values[0]:.2f})")
    minutes = minute_medians(series)
    if minutes:
        meds = [v for _, v in minutes]
        print(f"minute medians ({len(meds)}): " + ", ".join(f"{v:.2f}" for v in meds)
              + f" (max/min {max(meds) / min(meds):.2f})")
    out: dict[str, Any] = {"series": series, "minutes": minutes, "lags": {}}
    for lag_min in (1, 2, 5):
        row = {}
        for name, points, step in (("probes", series, every_s), ("minutes", minutes, 60.0)):
            pairs, over = lag_changes(points, lag_min * 60, step)
            if pairs:
                row[name] = {"pairs": pairs, "over_tolerance": over}
                print(f"{lag_min} min apart, {name}: {over} of {pairs} pairs ({over / pairs:.0%}) differ by more "
                      f"than {TOLERANCE:.0%}")
        out["lags"][lag_min] = row
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=None, help="a running vLLM started by engines/serve.py (default: start one)")
    ap.add_argument("--model", default=None, help="the model name --url serves (default: engines/serve.py's)")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between probes")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--tables", type=Path, default=None, help="only summarise a series kept with --json")
    args = ap.parse_args()
    if args.tables is not None:
        kept = json.loads(args.tables.read_text())
        summary([(float(a), float(b)) for a, b in kept["series"]], float(kept.get("every_s", args.every)))
        return 0
    server = None
    url = args.url
    serve = _serve()
    if url is None:
        server = serve.start_vllm(log_dir=Path(tempfile.mkdtemp(prefix="rushhour-engine-speed-")), cpu=1)
        url = server.url
    model = args.model or serve.MODEL_NAME
    series: list[tuple[float, float]] = []
    try:
        probe(url, model)  # warm-up, not counted
        start = time.monotonic()
        while time.monotonic() - start < args.minutes * 60:
            at = time.monotonic() - start
            ms = probe(url, model)
            if ms is not None:
                series.append((at, ms))
                print(f"{at:6.0f} s  {ms:6.2f} ms a token", flush=True)
            time.sleep(max(0.0, args.every - (time.monotonic() - start - at)))
    finally:
        if server is not None:
            server.stop()
    if len(series) < 3:
        print("too few probes answered")
        return 1
    print()
    result = summary(series, args.every) | {"every_s": args.every}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
