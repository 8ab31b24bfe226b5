"""A tiny real OTLP/HTTP receiver on loopback for the tests: takes ``POST /v1/traces`` and ``/v1/metrics``, decodes
the protobuf with ``opentelemetry-proto`` (the exporter's own dependency) and keeps what arrived."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass
class Received:
    spans: list[Any] = field(default_factory=list)  # opentelemetry.proto.trace.v1.Span
    resources: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[Any] = field(default_factory=list)  # opentelemetry.proto.metrics.v1.Metric, every export
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""


def attributes(items: Any) -> dict[str, Any]:
    """OTLP key-values as a plain dict."""
    found: dict[str, Any] = {}
    for kv in items:
        kind = kv.value.WhichOneof("value")
        found[kv.key] = getattr(kv.value, kind) if kind else None
    return found


@contextmanager
def otlp_receiver() -> Iterator[Received]:
    """Serve on 127.0.0.1 (any free port) until the block ends; ``url`` is the base to give the exporter."""
    got = Received()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            with lock:
                got.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path == "/v1/traces":
                    req = ExportTraceServiceRequest.FromString(body)
                    for rs in req.resource_spans:
                        got.resources.append(attributes(rs.resource.attributes))
                        got.spans.extend(s for ss in rs.scope_spans for s in ss.spans)
                elif self.path == "/v1/metrics":
                    got.metrics.extend(m for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics
                                       for sm in rm.scope_metrics for m in sm.metrics)
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
