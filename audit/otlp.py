"""The run's attempts as OpenTelemetry spans and its per-tier figures as OTLP metrics, fed by the shard tail.

``rushhour run --otlp`` (or ``--otlp-endpoint URL``) sends over OTLP/HTTP protobuf, with the official SDK and
exporter (the ``otel`` extra; imported only by a run that asks: this module is imported lazily by the CLI). One
span per attempt that was sent, made after the fact from its record in the CLI's process, never in the load
generator: its trace id and span id are the ones the attempt's ``traceparent`` header carried
(records/traceparent.py), so the span joins the gateway's and the servers' traces; start and end are the record's
send and end, on the run's wall-clock anchor; its class is the audit's (audit/live.py ``live_class``, the one
the live metrics use). Metrics: attempts by tier and class, arrivals not sent, a TTFT histogram of served attempts.
No header and no request text is exported (records hold none); the endpoint is named without its userinfo.

A dead or slow collector never fails or slows the run: spans wait in a bounded queue and one daemon thread sends
them in batches; at the end the export gets a bounded wait, and what was sent, failed or dropped is said in
``run.json``'s ``otlp`` block and, when anything was lost, in a warning.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.parse
from collections import deque
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from rushhour.audit.live import NS, TTFT_BUCKETS, live_class, route_profiles
from rushhour.records.traceparent import trace_ids
from rushhour.scenarios.model import Scenario

QUEUE_MAX = 100_000  # spans waiting for the collector; past it the newest are dropped (and counted)
BATCH = 512  # spans per export request
SEND_EVERY_S = 1.0  # the sender thread wakes this often
CLOSE_WAIT_S = 5.0  # at the end: at most this long for the last batches and the last metrics
METRIC_EVERY_MS = 5_000  # metrics export interval unless OTEL_METRIC_EXPORT_INTERVAL says otherwise
SCOPE = InstrumentationScope("rushhour")


def shown_endpoint(url: str) -> str:
    """An endpoint as it may be printed and stored: no userinfo, no query (either may hold a credential)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))[:200]


def signal_urls(endpoint: str | None) -> tuple[str | None, str | None]:
    """``--otlp-endpoint``'s base URL as the traces and metrics URLs (None: the SDK's standard env vars decide)."""
    if endpoint is None:
        return None, None
    base = endpoint.rstrip("/")
    return f"{base}/v1/traces", f"{base}/v1/metrics"


def span_attributes(record: dict[str, Any], cls: str) -> dict[str, Any]:
    """A span's attributes from one attempt's record: who, the audit's class, the status, timings, token counts."""
    attrs: dict[str, Any] = {
        "rushhour.tier": str(record.get("tier") or "?")[:64], "rushhour.persona": str(record.get("persona") or "")[:64],
        "rushhour.class": cls, "rushhour.route": str(record.get("route") or "primary")[:64],
        "rushhour.attempt": _int(record.get("attempt")) or 1, "rushhour.request_id": str(record.get("request_id"))[:64],
        "gen_ai.operation.name": "chat", "gen_ai.request.model": str(record.get("model") or "")[:128],
    }
    if record.get("control") or record.get("twin_of"):
        attrs["rushhour.control"] = True
    status = _int(record.get("status"))
    if status:
        attrs["http.response.status_code"] = status
    if record.get("reason"):
        attrs["rushhour.reason"] = str(record["reason"])[:200]
    sent = _int(record.get("sent_ns"))
    for name, field in (("ttft_s", "first_token_ns"), ("e2e_s", "done_ns")):
        end = _int(record.get(field))
        if sent is not None and end is not None and end >= sent:
            attrs[f"rushhour.{name}"] = (end - sent) / NS
    intended = _int(record.get("intended_ns"))
    if sent is not None and intended is not None and sent >= intended:
        attrs["rushhour.send_lag_s"] = (sent - intended) / NS  # the generator's own lateness (not the server's)
    for name, field in (("rushhour.server_queue_ms", "metrics_queue_time_ms"),
                        ("rushhour.gateway_queue_ms", "gateway_queue_ms")):
        value = record.get(field)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attrs[name] = float(value)
    for name, fields in (("gen_ai.usage.input_tokens", ("prompt_tokens", "prompt_tokens_intended")),
                         ("gen_ai.usage.output_tokens", ("output_tokens",)), ("rushhour.tokens_streamed", ("tokens",))):
        count = next((v for f in fields if (v := _int(record.get(f))) is not None), None)
        if count is not None:
            attrs[name] = count
    return attrs


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class CountedMetricExporter(OTLPMetricExporter):
    """The SDK's OTLP metric exporter, counting its exports that failed (the reader only logs them)."""

    failed = 0
    exported = 0

    def export(self, metrics_data: MetricsData, timeout_millis: float | None = 10000,
               **kwargs: Any) -> MetricExportResult:
        try:
            result = super().export(metrics_data, timeout_millis, **kwargs)
        except Exception:  # the collector's problem never becomes the run's
            result = MetricExportResult.FAILURE
        if result is MetricExportResult.SUCCESS:
            self.exported += 1
        else:
            self.failed += 1
        return result


class OtlpExport:
    """A shard-tail listener that turns each attempt's record into a span and keeps per-tier OTLP metrics."""

    def __init__(self, scenario: Scenario, endpoint: str | None = None) -> None:
        _quiet_sdk_logs()
        traces_url, metrics_url = signal_urls(endpoint)
        self.span_exporter = OTLPSpanExporter(endpoint=traces_url)
        self.endpoint = shown_endpoint(endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                                       or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318")
        self.metric_exporter = CountedMetricExporter(endpoint=metrics_url)
        self.profiles = route_profiles(scenario)
        self.scenario = scenario.name
        self.resource: Any = None
        self.meters: Any = None
        self.wall_anchor_ns: int | None = None
        self.queue: deque[ReadableSpan] = deque()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.counts = {"spans": 0, "exported": 0, "failed": 0, "dropped": 0, "unanchored": 0, "no_trace_id": 0}
        self.error: str | None = None
        self.attempt_counts: dict[tuple[str, str], int] = {}
        self.not_sent_counts: dict[str, int] = {}
        self.sender: threading.Thread | None = None

    def start(self, run_id: str, wall_anchor_ns: int) -> None:
        """The run is anchored: start the metrics reader and the span sender (records before this are not fed)."""
        from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

        self.wall_anchor_ns = wall_anchor_ns
        resource = Resource.create({"rushhour.run_id": run_id, "rushhour.scenario": self.scenario})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "rushhour"}))  # OTEL_SERVICE_NAME wins when set
        self.resource = resource
        interval = None if os.environ.get("OTEL_METRIC_EXPORT_INTERVAL") else METRIC_EVERY_MS
        reader = PeriodicExportingMetricReader(self.metric_exporter, export_interval_millis=interval)
        view = View(instrument_name="rushhour.ttft",
                    aggregation=ExplicitBucketHistogramAggregation(boundaries=TTFT_BUCKETS))
        self.meters = MeterProvider(metric_readers=[reader], resource=resource, views=[view], shutdown_on_exit=False)
        meter = self.meters.get_meter("rushhour")
        # the counters are this listener's own dicts, read by the SDK at each export: a dict increment per record
        # instead of the SDK's per-measurement path (benchmarks/otlp.py)
        meter.create_observable_counter("rushhour.attempts", [self._observe_attempts], unit="{attempt}",
                                        description="Attempts that ended, by tier and the audit's class.")
        meter.create_observable_counter("rushhour.not_sent", [self._observe_not_sent], unit="{arrival}",
                                        description="Arrivals the generator did not send, by tier.")
        self.ttft = meter.create_histogram("rushhour.ttft", unit="s",
                                           description="Time to first token of served attempts, from the send.")
        self.sender = threading.Thread(target=self._send_loop, name="rushhour-otlp", daemon=True)
        self.sender.start()

    def feed(self, record: dict[str, Any], shard: str = "") -> None:
        """Take one line as the shard tail read it: a sent attempt becomes a span and counts in the metrics."""
        if record.get("kind") != "request" or self.wall_anchor_ns is None:
            return
        tier = str(record.get("tier") or "?")[:64]
        control = bool(record.get("control") or record.get("twin_of"))
        if record.get("not_sent"):
            if not control:
                self.not_sent_counts[tier] = self.not_sent_counts.get(tier, 0) + 1
            return
        cls = live_class(self.profiles, record)
        if not control:  # the priority control's twins count in no tier figure (as on /metrics)
            self.attempt_counts[(tier, cls)] = self.attempt_counts.get((tier, cls), 0) + 1
            sent, first = _int(record.get("sent_ns")), _int(record.get("first_token_ns"))
            if cls == "served" and sent is not None and first is not None and first >= sent:
                self.ttft.record((first - sent) / NS, {"tier": tier})
        span = self._span(record, cls)
        if span is None:
            return
        with self.lock:
            self.counts["spans"] += 1
            if len(self.queue) >= QUEUE_MAX:
                self.counts["dropped"] += 1
                return
            self.queue.append(span)
            if len(self.queue) >= BATCH:
                self.wake.set()

    def _observe_attempts(self, _options: CallbackOptions) -> list[Observation]:
        return [Observation(n, {"tier": tier, "class": cls}) for (tier, cls), n in list(self.attempt_counts.items())]

    def _observe_not_sent(self, _options: CallbackOptions) -> list[Observation]:
        return [Observation(n, {"tier": tier}) for tier, n in list(self.not_sent_counts.items())]

    def _span(self, record: dict[str, Any], cls: str) -> ReadableSpan | None:
        ids = trace_ids(str(record.get("logical_id") or ""), str(record.get("request_id") or ""))
        sent = _int(record.get("sent_ns"))
        if ids is None:
            self.counts["no_trace_id"] += 1
            return None
        if sent is None or self.wall_anchor_ns is None:
            self.counts["unanchored"] += 1
            return None
        end = max(sent, *(v for f in ("done_ns", "last_token_ns", "first_token_ns", "headers_ns")
                          if (v := _int(record.get(f))) is not None))
        context = SpanContext(int(ids[0], 16), int(ids[1], 16), is_remote=False,
                              trace_flags=TraceFlags(TraceFlags.SAMPLED))
        served = cls == "served"
        status = Status(StatusCode.OK) if served else Status(StatusCode.ERROR, cls)
        model = str(record.get("model") or "")[:128]
        return ReadableSpan(name=f"chat {model}".strip(), context=context, parent=None, resource=self.resource,
                            attributes=span_attributes(record, cls), kind=SpanKind.CLIENT, status=status,
                            start_time=self.wall_anchor_ns + sent, end_time=self.wall_anchor_ns + end,
                            instrumentation_scope=SCOPE)

    def _send_loop(self) -> None:
        while True:
            self.wake.wait(SEND_EVERY_S)
            self.wake.clear()
            while True:
                with self.lock:
                    batch = [self.queue.popleft() for _ in range(min(BATCH, len(self.queue)))]
                if not batch:
                    break
                self._export(batch)
                if self.stopping.is_set() and self.error is not None:
                    return  # the end, and the collector is failing: no more tries
            if self.stopping.is_set():
                return

    def _export(self, batch: list[ReadableSpan]) -> None:
        try:
            result = self.span_exporter.export(batch)
        except Exception as exc:  # the collector's problem never becomes the run's
            result, self.error = SpanExportResult.FAILURE, f"{type(exc).__name__}: {exc}"[:300]
        with self.lock:
            if result is SpanExportResult.SUCCESS:
                self.counts["exported"] += len(batch)
            else:
                self.counts["failed"] += len(batch)
                self.error = self.error or f"the collector at {self.endpoint} refused or did not answer"

    def close(self) -> dict[str, Any]:
        """Send what is left (a bounded wait), stop, and say what was exported: run.json's ``otlp`` block."""
        if self.sender is not None:
            self.stopping.set()
            self.wake.set()
            self.sender.join(CLOSE_WAIT_S if self.error is None else 0.1)  # a failing collector gets no more time
        if self.meters is not None:
            closer = threading.Thread(target=self._close_meters, daemon=True)
            closer.start()
            closer.join(CLOSE_WAIT_S if self.error is None and not self.metric_exporter.failed else 0.1)
        self.span_exporter.shutdown()  # aborts a retry still waiting; the daemon threads end with the process
        with self.lock:
            counts = dict(self.counts)
        # not exported: failed, dropped at the queue's bound, or still waiting when the bounded wait ran out
        counts["lost"] = counts["spans"] - counts["exported"]
        counts["metric_exports"] = self.metric_exporter.exported
        counts["metric_exports_failed"] = self.metric_exporter.failed
        if self.metric_exporter.failed and self.error is None:
            self.error = f"the collector at {self.endpoint} refused or did not answer the metrics"
        return {"endpoint": self.endpoint, **counts, "error": self.error}

    def _close_meters(self) -> None:
        try:
            self.meters.shutdown(timeout_millis=CLOSE_WAIT_S * 1000)
        except Exception as exc:  # the collector's problem never becomes the run's
            self.error = self.error or f"metrics: {type(exc).__name__}: {exc}"[:300]


def _quiet_sdk_logs() -> None:
    """The exporter logs each failed batch; the run says it once, in its own warning (no log spam, no traceback)."""
    logger = logging.getLogger("opentelemetry")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
