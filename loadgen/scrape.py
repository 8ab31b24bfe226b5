"""Prometheus scraping during a run: poll ``/metrics``, keep the families that matter, append JSONL.

Each scrape appends one line to ``runs/<id>/metrics.jsonl``::

    {"ts_ns": <ns since the run's monotonic anchor>, "clock": "anchor", "dur_ns": ...,
     "samples": [{"name", "labels", "value"}]}

or, when the endpoint is slow, missing (404, refused) or returns something that is not the
Prometheus text format, ``{"ts_ns": ..., "dur_ns": ..., "error": "<short text>"}``; after an error the
scraper backs off (interval doubled per consecutive error, up to ``max_backoff_s``) and returns to
its interval after the next good scrape. Non-finite values (NaN, ±Inf) are written as ``null``.

What is kept: the families the target's stack profile names (``stacks/<name>.py``: ``Metrics.prefixes``
and ``Metrics.names``), or fixed name prefixes. Redirects (LiteLLM answers ``/metrics`` with a 307 to
``/metrics/``) are followed, at most ``MAX_REDIRECTS`` hops; a credential (``env:VAR`` in the scenario,
read once at start) is sent as a bearer token to the endpoint's own origin only, and never written to
the file or any message. A 401/403 becomes one clear ``error`` line, and a scrape whose page had samples
but none the profile keeps says so (``seen``), so an empty metrics file is never silent.

Where it runs: ``MetricsScraper`` uses a plain ``threading.Thread``. Run it in the runner (parent)
process, which is not gevent-patched, so parsing a large ``/metrics`` page never delays a Locust
user. In a gevent-patched process the thread becomes a greenlet and parsing runs on the loop; use
``python -m rushhour.loadgen.scrape`` (a separate process) there instead. Each request has a hard deadline
(``timeout_s`` for the whole response, not per read) and a body size cap.

The parser is ``prometheus_client.parser.text_string_to_metric_families``.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import math
import os
import signal
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from rushhour import stacks

# without a profile (``python -m rushhour.loadgen.scrape`` alone): every prefix any stack profile keeps
DEFAULT_PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(p for s in stacks.STACKS for p in s.metrics.prefixes))
MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
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


def parse_metrics_text(text: str, prefixes: Sequence[str] | None = None,
                       keep: Callable[[str], bool] | None = None) -> list[Sample]:
    """Parse Prometheus text exposition; keep samples whose name starts with one of ``prefixes``
    or that ``keep`` accepts (both None keeps all). Raises ``ValueError`` on text that is not the
    Prometheus format."""
    return parse_counted(text, prefixes, keep)[0]


def parse_counted(text: str, prefixes: Sequence[str] | None = None,
                  keep: Callable[[str], bool] | None = None) -> tuple[list[Sample], int]:
    """``parse_metrics_text`` and how many samples the page had in all."""
    samples: list[Sample] = []
    seen = 0
    wanted = tuple(prefixes) if prefixes is not None else None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            seen += 1
            if (wanted is None and keep is None) or (wanted is not None and s.name.startswith(wanted)) \
                    or (keep is not None and keep(s.name)):
                samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    return samples, seen


def profile_filter(profile: str | None, testbed: bool = False) -> Callable[[str], bool]:
    """The metric families a stack profile's audit reads (``stacks/<name>.py``); with ``testbed`` also
    those of the stack the testbed imitates and its own health (``testbed_``, e.g. step lag). KeyError
    for an unknown profile."""
    keeps = stacks.get(profile).metrics.keeps
    if not testbed:
        return keeps
    # the testbed imitates another stack for some profiles (smg → llm-d): keep what it exports too, and its
    # engine's vLLM families, which every testbed profile exports (behind LiteLLM too: its vLLM's histograms)
    imitated = stacks.get(stacks.testbed_profile(stacks.canonical(profile) if profile else stacks.DEFAULT))
    return lambda name: keeps(name) or imitated.metrics.keeps(name) or name.startswith(("testbed_", "vllm:"))


class ScrapeError(Exception):
    """A scrape that produced no samples: the message is what goes into the ``error`` line."""


def fetch(url: str, timeout_s: float, max_bytes: int = MAX_BODY_BYTES, *, token: str | None = None,
          credential_name: str | None = None) -> str:
    """GET ``url`` with a hard deadline for the whole response (redirects included); the body as text.

    Redirects are followed up to ``MAX_REDIRECTS`` hops. ``token`` goes as ``Authorization: Bearer``
    to the first URL's origin only (a redirect elsewhere does not get it). Failures raise ScrapeError
    with a one-line message that never contains the token (``credential_name`` names it, e.g. env:VAR).
    """
    deadline = time.monotonic() + timeout_s
    origin = _origin(url)
    for _hop in range(MAX_REDIRECTS + 1):
        auth = token if token is not None and _origin(url) == origin else None
        status, reason, location, body = _get_once(url, deadline, timeout_s, max_bytes, auth)
        if status in _REDIRECTS and location:
            url = urllib.parse.urljoin(url, location)
            continue
        said = f"http {status} {reason}".strip()
        if status in (401, 403):
            if token is None:
                raise ScrapeError(f"{said}: the metrics endpoint wants a credential "
                                  "(target.metrics.credential: env:VAR)")
            raise ScrapeError(f"{said}: the metrics endpoint refused the credential {credential_name or ''}".strip())
        if status != 200:
            raise ScrapeError(said)
        return body
    raise ScrapeError(f"more than {MAX_REDIRECTS} redirects (last to {_no_query(url)})")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _no_query(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def _get_once(url: str, deadline: float, timeout_s: float, max_bytes: int,
              token: str | None) -> tuple[int, str, str | None, str]:
    """One GET: (status, reason, Location, body text); the body is read only for a 200."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapeError(f"bad url {_no_query(url)!r}")
    left = deadline - time.monotonic()
    if left <= 0:
        raise ScrapeError(f"timeout after {timeout_s:g}s")
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname, parts.port, timeout=left)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    headers = {"Accept": "text/plain;version=0.0.4", "Connection": "close"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return resp.status, resp.reason or "", resp.getheader("location"), ""
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
        return 200, resp.reason or "", None, b"".join(chunks).decode("utf-8", errors="replace")
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

    ``start()`` returns at once; ``stop()`` takes one last scrape (the counters at the end) and ends the
    loop within about ``timeout_s``, and closes the file.
    It never raises into the caller: every failure becomes an ``error`` line. ``keep`` (a stack
    profile's ``Metrics.keeps``) replaces ``prefixes`` when given; ``token`` is the credential's value
    (sent by the default fetcher only), ``credential_name`` how messages name it.
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
        keep: Callable[[str], bool] | None = None,
        token: str | None = None,
        credential_name: str | None = None,
    ) -> None:
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be > 0")
        self.url = url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.out_path = Path(out_path)
        self.write_error: str | None = None  # metrics.jsonl could not be written (a full disk)
        self.anchor = anchor
        self.keep = keep
        self.prefixes = tuple(prefixes) if prefixes is not None and keep is None else None
        self.max_backoff_s = max_backoff_s if max_backoff_s is not None else max(30.0, interval_s * 8)
        self.max_scrapes = max_scrapes
        if fetcher is fetch and token is not None:
            self._fetch: Callable[[str, float], str] = functools.partial(
                fetch, token=token, credential_name=credential_name)
        else:
            self._fetch = fetcher
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.scrapes = 0
        self.errors = 0
        self.consecutive_errors = 0
        self.empty = 0  # scrapes whose page had samples, none of them kept
        self.last_error: str | None = None
        self.last_seen = 0

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
            samples, seen = parse_counted(text, self.prefixes, self.keep)
            line["samples"] = [s.to_json() for s in samples]
            if seen and not samples:  # say it: an endpoint of another stack, or renamed metrics
                line["seen"] = seen
                self.empty += 1
                self.last_seen = seen
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
            self.last_error = line["error"]
        return line

    def report(self) -> str | None:
        """One line for the user when scraping went wrong (failed scrapes, or nothing the profile reads)."""
        if self.scrapes == 0:
            return None
        if self.errors:
            return f"metrics: {self.errors} of {self.scrapes} scrapes of {_no_query(self.url)} failed " \
                   f"(last: {self.last_error})"
        if self.empty == self.scrapes:
            return f"metrics: {_no_query(self.url)} had {self.last_seen} samples, none of the families " \
                   "this stack profile reads: no cross-check"
        return None

    def run(self) -> None:
        """The scrape loop (the thread's body); returns when stopped or after ``max_scrapes``."""
        try:
            self._loop()
        except OSError as exc:  # a full disk: stop scraping, never a thread traceback on the user's screen
            self.write_error = f"metrics: cannot write {self.out_path}: {exc.strerror or exc}"

    def _loop(self) -> None:
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        with self.out_path.open("a", encoding="utf-8") as out:
            while not self._stop.is_set():
                began = time.monotonic()
                self._write(out)
                if self.max_scrapes is not None and self.scrapes >= self.max_scrapes:
                    break
                self._stop.wait(max(0.0, self.next_delay() - (time.monotonic() - began)))
            else:
                # One more at the stop, the load over: a target too busy to answer during it (LiteLLM under
                # saturation on 2 cores, backed off to one try in 16 s) still gives the run's final counters.
                self._write(out)

    def _write(self, out: IO[str]) -> None:
        """One scrape, appended to ``metrics.jsonl`` as its line."""
        out.write(json.dumps(self.scrape_once(), separators=(",", ":"), allow_nan=False) + "\n")
        out.flush()

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


def metrics_url(target_url: str, configured: str | None, default_path: str = "/metrics") -> str | None:
    """The endpoint to scrape: a URL as is, a path (``/…``) under the target, ``auto`` → the target plus
    the profile's ``default_path``, None → none."""
    if configured is None:
        return None
    if configured == "auto":
        return target_url.rstrip("/") + default_path
    if configured.startswith("/"):
        return target_url.rstrip("/") + configured
    return configured


def read_credential(name: str, env: Mapping[str, str] | None = None) -> str:
    """The value of ``env:VAR`` (ValueError with a one-line message if malformed or unset)."""
    if not name.startswith("env:") or len(name) <= 4:
        raise ValueError("metrics credential must be 'env:VARIABLE', not a literal")
    value = (os.environ if env is None else env).get(name[4:])
    if not value:
        raise ValueError(f"environment variable {name[4:]} (metrics credential) is not set")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rushhour.loadgen.scrape URL OUT --anchor-ns N``: scrape in a separate process until SIGTERM."""
    from rushhour.records.record import Anchor

    parser = argparse.ArgumentParser(prog="python -m rushhour.loadgen.scrape", description=main.__doc__)
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=0.5)
    parser.add_argument("--anchor-ns", type=int, default=None, help="the run's monotonic anchor (run.json)")
    parser.add_argument("--prefix", action="append", default=None, help="metric name prefix (repeatable)")
    parser.add_argument("--all", action="store_true", help="keep every metric")
    parser.add_argument("--profile", default=None, help="keep the families this stack profile reads")
    parser.add_argument("--credential", default=None, help="env:VAR holding a bearer token for the endpoint")
    parser.add_argument("--max-scrapes", type=int, default=None)
    args = parser.parse_args(argv)
    anchor = Anchor.now()
    if args.anchor_ns is not None:
        anchor = Anchor(mono_ns=args.anchor_ns, wall_ns=anchor.wall_ns)
    prefixes = None if args.all else (args.prefix or DEFAULT_PREFIXES)
    try:
        keep = profile_filter(args.profile) if args.profile and not args.all else None
        token = read_credential(args.credential) if args.credential else None
    except (KeyError, ValueError) as exc:
        parser.error(str(exc).strip('"'))
    scraper = MetricsScraper(
        args.url,
        args.interval_s,
        args.timeout_s,
        args.out,
        anchor,
        prefixes=prefixes,
        max_scrapes=args.max_scrapes,
        keep=keep,
        token=token,
        credential_name=args.credential,
    )
    signal.signal(signal.SIGTERM, lambda *_: scraper._stop.set())
    signal.signal(signal.SIGINT, lambda *_: scraper._stop.set())
    scraper.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
