"""A tiny real OTLP/HTTP receiver on loopback for the tests: takes ``POST /v1/traces`` and ``/v1/metrics``, decodes
the protobuf with ``opentelemetry-proto`` (the exporter's own dependency) and keeps what arrived."""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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
def otlp_receiver(port: int = 0, on_post: Callable[[Received], None] | None = None) -> Iterator[Received]:
    """Serve on 127.0.0.1 (``port``, 0: any free one) until the block ends; ``url`` is the base to give the
    exporter; ``on_post`` sees what arrived after each request."""
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
                if on_post is not None:
                    on_post(got)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    got.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()


def attempts_sum(got: Received) -> int:
    """The last export's ``rushhour.attempts`` total over every tier and class (0 before one arrives)."""
    last = [m for m in got.metrics if m.name == "rushhour.attempts"]
    return sum(p.as_int for p in last[-1].sum.data_points) if last else 0


def main() -> None:
    """``python otlp_receiver.py PORT OUT.json``: serve (in another host's namespace) and keep a summary in OUT."""
    port, out = int(sys.argv[1]), Path(sys.argv[2])

    def write(got: Received) -> None:
        summary = {"span_ids": [s.span_id.hex() for s in got.spans], "attempts": attempts_sum(got)}
        out.with_suffix(".tmp").write_text(json.dumps(summary))
        out.with_suffix(".tmp").replace(out)

    with otlp_receiver(port, write):
        print("otlp receiver listening", flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
