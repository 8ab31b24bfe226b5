"""Prometheus scraping during a run: poll ``/metrics``, keep the families that matter, append JSONL.

Each scrape appends one line to ``runs/<id>/metrics.jsonl``::

    {"ts_ns": <ns since the run's monotonic anchor>, "clock": "anchor", "dur_ns": ...,
     "samples": [{"name", "labels", "value"}]}

or, when the endpoint is slow, missing (404, refused) or returns something that is not the
Prometheus text format, ``{"ts_ns": ..., "dur_ns": ..., "error": "<short text>"}``; after an error the
scraper backs off (interval doubled per consecutive error, up to ``max_backoff_s``) and returns to
its interval after the next good scrape. Non-finite values (NaN, ±Inf) are written as ``null``.

Where it runs: ``MetricsScraper`` uses a plain ``threading.Thread``. Run it in the runner (parent)
process, which is not gevent-patched, so parsing a large ``/metrics`` page never delays a Locust
user. In a gevent-patched process the thread becomes a greenlet and parsing runs on the loop; use
``python -m loadgen.scrape`` (a separate process) there instead. Each request has a hard deadline
(``timeout_s`` for the whole response, not per read) and a body size cap.

The parser is ``prometheus_client.parser.text_string_to_metric_families``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import signal
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

DEFAULT_PREFIXES: tuple[str, ...] = (
    "vllm:",
    "llm_d_epp_",
    "inference_extension_",
    "sglang:",
    "smg_",
    "testbed_",  # the embedded testbed's own health (e.g. step lag)
)
MAX_BODY_BYTES = 32 * 1024 * 1024
METRICS_FILE = "metrics.jsonl"


class _AnchorLike(Protocol):
    def since(self, mono_ns: int | None = None) -> int: ...


@dataclass(frozen=True, slots=True)
class Sample:
    """One Prometheus sample (``name`` keeps suffixes like ``_total``, ``_bucket``)."""

    name: str
    labels: dict[str, str]
    value: float

    def to_json(self) -> dict[str, Any]:
        value: float | None = self.value if math.isfinite(self.value) else None
        return {"name": self.name, "labels": self.labels, "value": value}


def parse_metrics_text(text: str, prefixes: Sequence[str] | None = None) -> list[Sample]:
    """Parse Prometheus text exposition; keep samples whose name starts with one of ``prefixes``
    (None keeps all). Raises ``ValueError`` on text that is not the Prometheus format."""
    samples: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if prefixes is None or any(s.name.startswith(p) for p in prefixes):
                samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    return samples


class ScrapeError(Exception):
    """A scrape that produced no samples: the message is what goes into the ``error`` line."""


def fetch(url: str, timeout_s: float, max_bytes: int = MAX_BODY_BYTES) -> str:
    """GET ``url`` with a hard deadline for the whole response; the body as text, or ScrapeError."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapeError(f"bad url {url!r}")
    deadline = time.monotonic() + timeout_s
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname, parts.port, timeout=timeout_s)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        conn.request("GET", path, headers={"Accept": "text/plain;version=0.0.4", "Connection": "close"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ScrapeError(f"http {resp.status} {resp.reason}".strip())
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ScrapeError(f"timeout after {timeout_s:g}s (body)")
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = resp.read1(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise ScrapeError(f"body larger than {max_bytes} bytes")
            chunks.append(chunk)
        if time.monotonic() > deadline:
            raise ScrapeError(f"timeout after {timeout_s:g}s (body)")
        return b"".join(chunks).decode("utf-8", errors="replace")
    except ScrapeError:
        raise
    except TimeoutError as exc:
        raise ScrapeError(f"timeout after {timeout_s:g}s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise ScrapeError(f"{type(exc).__name__}: {exc}"[:200]) from exc
    finally:
        conn.close()


class MetricsScraper:
    """Polls a ``/metrics`` endpoint every ``interval_s`` in a daemon thread and appends JSONL lines.

    ``start()`` returns at once; ``stop()`` ends the loop within about ``timeout_s`` and closes the file.
    It never raises into the caller: every failure becomes an ``error`` line.
    """

    def __init__(
        self,
        url: str,
        interval_s: float,
        timeout_s: float,
        out_path: Path | str,
        anchor: _AnchorLike,
        *,
        prefixes: Sequence[str] | None = DEFAULT_PREFIXES,
        max_backoff_s: float | None = None,
        max_scrapes: int | None = None,
        fetcher: Callable[[str, float], str] = fetch,
    ) -> None:
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be > 0")
        self.url = url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.out_path = Path(out_path)
        self.anchor = anchor
        self.prefixes = tuple(prefixes) if prefixes is not None else None
        self.max_backoff_s = max_backoff_s if max_backoff_s is not None else max(30.0, interval_s * 8)
        self.max_scrapes = max_scrapes
        self._fetch = fetcher
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.scrapes = 0
        self.errors = 0
        self.consecutive_errors = 0

    def next_delay(self) -> float:
        """Wait before the next scrape: the interval, doubled per consecutive error, capped."""
        if self.consecutive_errors == 0:
            return self.interval_s
        return min(self.max_backoff_s, self.interval_s * 2.0 ** min(self.consecutive_errors, 30))

    def scrape_once(self) -> dict[str, Any]:
        """One scrape, as the line that gets written (never raises)."""
        ts_ns = self.anchor.since()
        start = time.monotonic_ns()
        # "clock" says which clock ts_ns is on, so the audit never has to guess (audit/metrics.py)
        line: dict[str, Any] = {"ts_ns": ts_ns, "clock": "anchor"}
        try:
            text = self._fetch(self.url, self.timeout_s)
            samples = parse_metrics_text(text, self.prefixes)
            line["samples"] = [s.to_json() for s in samples]
            self.consecutive_errors = 0
        except ScrapeError as exc:
            line["error"] = str(exc)
        except ValueError as exc:
            line["error"] = f"unparseable metrics: {exc}"[:200]
        except Exception as exc:  # never let the scraper die or stall the run
            line["error"] = f"{type(exc).__name__}: {exc}"[:200]
        line["dur_ns"] = time.monotonic_ns() - start
        self.scrapes += 1
        if "error" in line:
            self.errors += 1
            self.consecutive_errors += 1
        return line

    def run(self) -> None:
        """The scrape loop (the thread's body); returns when stopped or after ``max_scrapes``."""
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        with self.out_path.open("a", encoding="utf-8") as out:
            while not self._stop.is_set():
                began = time.monotonic()
                line = self.scrape_once()
                out.write(json.dumps(line, separators=(",", ":"), allow_nan=False) + "\n")
                out.flush()
                if self.max_scrapes is not None and self.scrapes >= self.max_scrapes:
                    break
                self._stop.wait(max(0.0, self.next_delay() - (time.monotonic() - began)))

    def start(self) -> MetricsScraper:
        if self._thread is not None:
            raise RuntimeError("scraper already started")
        self._thread = threading.Thread(target=self.run, name=f"metrics-scraper {self.url}", daemon=True)
        self._thread.start()
        return self

    def stop(self, join_timeout_s: float | None = None) -> None:
        """Ask the loop to end and wait for it (at most one scrape deadline plus a margin)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(join_timeout_s if join_timeout_s is not None else self.timeout_s + 2.0)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the loop to end by itself (``max_scrapes``); True if it has ended."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return not self.running

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> MetricsScraper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def metrics_url(target_url: str, configured: str | None) -> str | None:
    """The endpoint to scrape: ``configured`` as is, ``auto`` → ``<target>/metrics``, None → none."""
    if configured is None:
        return None
    if configured == "auto":
        return target_url.rstrip("/") + "/metrics"
    return configured


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m loadgen.scrape URL OUT --anchor-ns N``: scrape in a separate process until SIGTERM."""
    from loadgen.record import Anchor

    parser = argparse.ArgumentParser(prog="python -m loadgen.scrape", description=main.__doc__)
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=0.5)
    parser.add_argument("--anchor-ns", type=int, default=None, help="the run's monotonic anchor (run.json)")
    parser.add_argument("--prefix", action="append", default=None, help="metric name prefix (repeatable)")
    parser.add_argument("--all", action="store_true", help="keep every metric")
    parser.add_argument("--max-scrapes", type=int, default=None)
    args = parser.parse_args(argv)
    anchor = Anchor.now()
    if args.anchor_ns is not None:
        anchor = Anchor(mono_ns=args.anchor_ns, wall_ns=anchor.wall_ns)
    prefixes = None if args.all else (args.prefix or DEFAULT_PREFIXES)
    scraper = MetricsScraper(
        args.url,
        args.interval_s,
        args.timeout_s,
        args.out,
        anchor,
        prefixes=prefixes,
        max_scrapes=args.max_scrapes,
    )
    signal.signal(signal.SIGTERM, lambda *_: scraper._stop.set())
    signal.signal(signal.SIGINT, lambda *_: scraper._stop.set())
    scraper.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
