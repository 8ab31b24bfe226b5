"""The server's front end, measured for ``rushhour calibrate``: its CPU per request, and whether that CPU is taken
from the engine's own steps (the two sharing a core) or runs beside them.

vLLM's API server (HTTP, chat template, tokenising, detokenising the stream) is one process and its engine core
another; on a host that gives them one core, every millisecond the front end runs is a millisecond the engine's
step waits. The replica model's step terms are fitted from the engine's own timing, so they already hold the
front end's per-step and per-token share of the probes (the engine core stamps its steps after the front end's
time slices); what the probes do not show is the front end's work for requests arriving while the engine is busy.
Two measurements, both read from the server's own ``process_cpu_seconds_total`` (its API server process, on
``/metrics``), never from the client's clock:

1. CPU per request: groups of requests sent one at a time (one output token each), the counter read around each
   group, less the counter's own reads; the median over groups, and its interval (the groups' range).
2. Sharing: one long stream alone, then the same stream while requests the front end refuses itself (a context too
   long: parsed, templated, tokenised, then 400, never reaching the engine) keep it busy. The front end's share of a
   core during the stream is measured from the counter; if the engine's own inter-token time grows by about that
   share, the two share a core and the front end's CPU serialises with the engine's steps. (A client on the
   server's host may take the engine's core too, and lean the verdict towards sharing.)
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rushhour.loadgen.scrape import parse_metrics_text

CPU_COUNTER = "process_cpu_seconds_total"
MAX_BODY = 4 * 2**20
TIMEOUT_S = 30.0
GROUPS = 5  # the median of 5 groups lies within their range with 94 % probability (1 − 2/2^5)
PER_GROUP = 20  # the counter moves in 10 ms ticks: 0.5 ms a request
STREAM_TOKENS = 96
FLOOD_THREADS = 4
SHARED_IF = 0.5  # the engine lost at least half the front end's share of a core: they share it


class FrontError(ValueError):
    """The front end could not be measured (one line)."""


@dataclass(frozen=True)
class FrontEnd:
    """What was measured of the server's front end; None where unmeasured, with the reason in ``evidence``."""

    cpu_s: float | None  # API server CPU per request (one output token), median over groups
    interval: tuple[float, float] | None  # the groups' range: a 94 % interval of that median
    shares_core: bool | None  # the front end's CPU is taken from the engine's steps
    front_share: float | None  # the front end's share of a core during the loaded stream
    engine_loss: float | None  # 1 − (engine ITL alone / engine ITL under the front-end load)
    evidence: str


def _read(url: str, data: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return resp.status, resp.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(MAX_BODY)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise FrontError(f"the front-end probe could not reach the server: {str(exc).splitlines()[0][:160]}") \
            from None


def api_cpu_s(target: str) -> float | None:
    """The API server's CPU seconds so far (``process_cpu_seconds_total``), None when the server has none."""
    _, page = _read(target.rstrip("/") + "/metrics")
    try:  # the scraper's parser (prometheus_client's), not a second one
        samples = parse_metrics_text(page.decode("utf-8", errors="replace"), [CPU_COUNTER])
    except ValueError:  # not the Prometheus format: no counter to read
        return None
    values = [s.value for s in samples if s.name == CPU_COUNTER and not s.labels]
    return values[0] if len(values) == 1 and 0 <= values[0] < 1e9 else None


def body(model: str, tokens: int, prompt_words: int = 48) -> bytes:
    """A chat request pinned to ``tokens`` output tokens, not streamed, asking for the engine's timing."""
    return json.dumps({"model": model, "messages": [{"role": "user", "content": " hello" * prompt_words}],
                       "max_tokens": tokens, "min_tokens": min(tokens, 100_000), "ignore_eos": True,
                       "stream": False}).encode()


def _chat(target: str, data: bytes) -> tuple[int, dict[str, Any]]:
    status, raw = _read(target.rstrip("/") + "/v1/chat/completions", data)
    try:
        obj = json.loads(raw)
    except ValueError:
        obj = {}
    return status, obj if isinstance(obj, dict) else {}


def per_request_cpu(target: str, model: str, groups: int = GROUPS, per_group: int = PER_GROUP) -> list[float]:
    """Each group's API server CPU per request (s), the counter's own reads taken off."""
    first = api_cpu_s(target)
    if first is None:
        raise FrontError("the server exposes no process_cpu_seconds_total on /metrics: its front end's CPU is "
                         "unmeasured")
    reads = 6
    for _ in range(reads - 1):
        last = api_cpu_s(target)
    read_cost = max(0.0, ((last or first) - first) / (reads - 1))
    out = []
    for _ in range(groups):
        before = api_cpu_s(target) or 0.0
        for _ in range(per_group):
            status, _ = _chat(target, body(model, 1))
            if status != 200:
                raise FrontError(f"a front-end probe request was answered {status}")
        after = api_cpu_s(target) or 0.0
        out.append(max(0.0, (after - before - read_cost) / per_group))
    return out


def _stream_itl_ms(target: str, model: str) -> float | None:
    """One pinned request's engine mean inter-token time (its ``metrics``), None when the engine gave none."""
    status, obj = _chat(target, body(model, STREAM_TOKENS, 16))
    itl = (obj.get("metrics") or {}).get("mean_itl_ms") if status == 200 else None
    return float(itl) if isinstance(itl, int | float) and itl > 0 else None


def _loaded_itl(target: str, model: str) -> tuple[float | None, float]:
    """The stream's engine ITL while threads keep the front end busy with refused requests; (ITL ms, the front
    end's share of a core over the stream)."""
    stop = threading.Event()
    refused = body(model, 10**7, 64)  # past any context: refused by the front end after tokenising

    def flood() -> None:
        while not stop.is_set():
            try:
                _chat(target, refused)
            except FrontError:
                return

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(FLOOD_THREADS)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # the flood running before the stream starts
    c0, t0 = api_cpu_s(target) or 0.0, time.monotonic()
    itl = _stream_itl_ms(target, model)
    c1, t1 = api_cpu_s(target) or 0.0, time.monotonic()
    stop.set()
    for t in threads:
        t.join(timeout=TIMEOUT_S)
    return itl, (c1 - c0) / max(t1 - t0, 1e-3)


def measure(target: str, model: str, say: Callable[[str], Any] = print) -> FrontEnd:
    """Both measurements (see the module's docstring); a FrontEnd with None fields and the reason when a part
    could not be measured."""
    try:
        groups = per_request_cpu(target, model)
    except FrontError as exc:
        return FrontEnd(None, None, None, None, None, str(exc))
    try:
        return _sharing(target, model, groups, say)
    except FrontError as exc:
        cpu = statistics.median(groups)
        return FrontEnd(cpu, (min(groups), max(groups)), None, None, None,
                        f"whether the front end shares the engine's core is unmeasured: {exc}")


def _sharing(target: str, model: str, groups: list[float], say: Callable[[str], Any]) -> FrontEnd:
    """The sharing half of ``measure``, given the CPU groups."""
    cpu = statistics.median(groups)
    interval = (min(groups), max(groups))
    alone, loaded, shares = [], [], []
    for _ in range(2):  # alternated: a drift of the host's speed falls on both
        a = _stream_itl_ms(target, model)
        b, share = _loaded_itl(target, model)
        if a is None or b is None:
            return FrontEnd(cpu, interval, None, None, None, "the engine reported no inter-token time: whether "
                            "the front end shares its core is unmeasured")
        alone.append(a)
        loaded.append(b)
        shares.append(share)
    a_ms, b_ms, share = statistics.median(alone), statistics.median(loaded), statistics.median(shares)
    loss = 1 - a_ms / b_ms
    if share < 0.1:
        return FrontEnd(cpu, interval, None, share, loss, f"the refused requests kept the front end only "
                        f"{share:.0%} busy: too little to tell whether it shares the engine's core")
    shared = loss >= SHARED_IF * share
    evidence = (f"front end {share:.0%} of a core busy with refused requests: the engine's inter-token time "
                f"{a_ms:.2f} → {b_ms:.2f} ms (it lost {loss:.0%} of its core); "
                + ("they share a core: the front end's CPU serialises with the engine's steps" if shared else
                   "the engine kept its pace: the front end runs on cores of its own"))
    say(f"calibrate: front end {1000 * cpu:.2f} ms CPU a request [{1000 * interval[0]:.2f}, "
        f"{1000 * interval[1]:.2f}]; {evidence}")
    return FrontEnd(cpu, interval, shared, share, loss, evidence)
