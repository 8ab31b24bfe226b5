"""The run's own figures while it runs: a Prometheus endpoint fed by the shard tail, classified as the audit does.

``rushhour run --metrics-port PORT`` serves ``/metrics`` on loopback (``--metrics-host`` to bind elsewhere) for as
long as the load runs. Per tier: attempts that ended, by the audit's class (the stack profile's rules, as the
early-abort watcher reads raw lines), arrivals not sent, and a TTFT histogram of served attempts; per load process:
requests in flight, the event loop's lag and arrivals it could not send (its last health sample). The master's
tail reads every process's shard, remote workers' included, so a multi-host run's figures are merged here. The
priority control's twins count in no tier figure (``rushhour_control_attempts_total``). The gate's verdict is the
audit's, after the run: these figures are for watching, and a scrape never changes a record.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from rushhour.audit.classify import classify_record
from rushhour.scenarios.model import Scenario

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
NS = 1e9


def route_profiles(scenario: Scenario) -> dict[str, str]:
    """Each route's stack profile by route name (the primary target's and every fallback's)."""
    profiles = {"primary": scenario.target.profile}
    profiles.update({r.name: r.profile for r in scenario.resilience.fallback})
    return profiles


def live_class(profiles: dict[str, str], record: dict[str, Any]) -> str:
    """The audit's class of one attempt's raw line, by the rules of the profile of the route it went to."""
    return classify_record(profiles.get(str(record.get("route") or "primary"), profiles["primary"]), record)


class LiveMetrics:
    """A shard-tail listener that keeps the run's figures in its own Prometheus registry and serves them."""

    def __init__(self, scenario: Scenario) -> None:
        self.route_profiles = route_profiles(scenario)
        self.registry = CollectorRegistry()
        reg = self.registry
        Gauge("rushhour_run_info", "The run being watched (always 1).", ["scenario"], registry=reg).labels(
            scenario=scenario.name).set(1)
        self.attempts = Counter("rushhour_attempts", "Attempts that ended, by tier and the audit's class.",
                                ["tier", "class"], registry=reg)
        self.not_sent = Counter("rushhour_not_sent", "Arrivals the generator did not send (every slot held, a "
                                "budget or an open breaker), by tier.", ["tier"], registry=reg)
        self.control = Counter("rushhour_control_attempts", "The priority control's twins that ended (in no tier "
                               "figure).", registry=reg)
        self.ttft = Histogram("rushhour_ttft_seconds", "Time to first token of served attempts, from the send.",
                              ["tier"], buckets=TTFT_BUCKETS, registry=reg)
        self.in_flight = Gauge("rushhour_in_flight", "Requests in flight, per load process (its last health "
                               "sample).", ["process"], registry=reg)
        self.loop_lag = Gauge("rushhour_loop_lag_seconds", "The load process's event-loop lag (its last health "
                              "sample).", ["process"], registry=reg)
        self.unsent = Gauge("rushhour_process_not_sent", "Arrivals the load process could not send so far.",
                            ["process"], registry=reg)
        self.server: Any = None

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Start serving ``/metrics`` (port 0: any free one); the port it listens on."""
        self.server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(self.server.server_port)

    def close(self) -> None:
        """Stop serving."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def feed(self, record: dict[str, Any], shard: str = "") -> None:
        """Take one record line as the shard tail read it (requests and health samples; the rest is not watched)."""
        kind = record.get("kind")
        if kind == "health":
            process = f"{shard or 'main'}:{record.get('worker_index', 0)}"
            for gauge, value, scale in ((self.in_flight, record.get("in_flight"), 1.0),
                                        (self.loop_lag, record.get("loop_lag_ns"), NS),
                                        (self.unsent, record.get("not_sent_total"), 1.0)):
                if isinstance(value, int | float) and not isinstance(value, bool):
                    gauge.labels(process=process).set(value / scale)
            return
        if kind != "request":
            return
        if record.get("control") or record.get("twin_of"):
            self.control.inc()
            return
        tier = str(record.get("tier") or "?")[:64]
        if record.get("not_sent"):
            self.not_sent.labels(tier=tier).inc()
            return
        cls = live_class(self.route_profiles, record)
        self.attempts.labels(tier=tier, **{"class": cls}).inc()
        sent, first = record.get("sent_ns"), record.get("first_token_ns")
        if cls == "served" and isinstance(sent, int) and isinstance(first, int) and first >= sent:
            self.ttft.labels(tier=tier).observe((first - sent) / NS)
