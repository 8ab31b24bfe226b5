"""Build deploy/grafana/rushhour.json with Grafana's typed dashboard builders (grafana-foundation-sdk, a dev tool).

    .venv/bin/python tools/grafana_board.py > deploy/grafana/rushhour.json

The board pairs a run's live figures (``rushhour run --metrics-port``, audit/live.py) with the stack's own: vLLM's
``vllm:`` families and llm-d's per-band flow control (``llm_d_epp_flow_control_*``: the names the testbed exports
as llm-d does, testbed/metrics.py). A templated Prometheus data source and a ``tier`` variable.
tests/e2e/test_live_metrics_e2e.py checks the shipped file is this script's output, decodes it through the SDK's
dashboard model, and finds every metric it queries in a real run's and a real testbed's exposition.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableOption, VariableRefresh

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
TIER = 'tier=~"$tier"'
RATE = "[$__rate_interval]"
IDS = itertools.count(1)  # every panel and row its own id, in board order


def panel(title: str, unit: str, description: str, *queries: tuple[str, str], width: int = 12) -> Timeseries:
    """A time series of PromQL ``queries`` (expression, legend) on the templated data source."""
    built = (Timeseries().id(next(IDS)).title(title).description(description).unit(unit).datasource(DS)
             .height(8).span(width)
             .legend(VizLegendOptions().display_mode(LegendDisplayMode.LIST).placement(LegendPlacement.BOTTOM)
                     .show_legend(True)))
    for ref, (expr, legend) in zip("ABCDEFGH", queries, strict=False):
        built = built.with_target(Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS))
    return built


def row(title: str) -> Row:
    """A row heading the panels after it."""
    return Row(title).id(next(IDS))


def board() -> Dashboard:
    """The dashboard: the run's figures first, then vLLM's, then llm-d's flow control."""
    quantiles = [(f"histogram_quantile({q}, sum by (tier, le) (rate(rushhour_ttft_seconds_bucket{{{TIER}}}{RATE})))",
                  f"{{{{tier}}}} p{int(q * 100)}") for q in (0.5, 0.9, 0.99)]
    return (
        Dashboard("rushhour: the run and the stack").uid("rushhour-run").tags(["rushhour", "llm", "load-test"])
        .description("A rushhour run's live figures (rushhour run --metrics-port) beside the serving stack's own: "
                     "vLLM's queue and batch, llm-d's flow control per priority band. The gate's verdict is the "
                     "audit's, after the run: this board is for watching.")
        .refresh("5s").time("now-30m", "now")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(QueryVariable("tier").label("tier").datasource(DS)
                       .query("label_values(rushhour_attempts_total, tier)").multi(True).include_all(True)
                       .all_value(".*").current(VariableOption(text="All", value="$__all", selected=True))
                       .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))
        .with_row(row("The run (rushhour --metrics-port)"))
        .with_panel(panel(
            "Sent and served per second, by tier", "reqps",
            "Attempts that ended (sent), and those the audit's rules class as served, per tier.",
            (f"sum by (tier) (rate(rushhour_attempts_total{{{TIER}}}{RATE}))", "{{tier}} sent"),
            (f"sum by (tier) (rate(rushhour_attempts_total{{{TIER}, class=\"served\"}}{RATE}))", "{{tier}} served")))
        .with_panel(panel(
            "Not served per second, by tier and class", "reqps",
            "Attempts not served, by the audit's class (queue_full, rejected, timeout, preempted …), and arrivals "
            "the generator did not send (not_sent: every slot held, a budget or an open breaker).",
            (f"sum by (tier, class) (rate(rushhour_attempts_total{{{TIER}, class!=\"served\"}}{RATE}))",
             "{{tier}} {{class}}"),
            (f"sum by (tier) (rate(rushhour_not_sent_total{{{TIER}}}{RATE}))", "{{tier}} not_sent")))
        .with_panel(panel("Time to first token (served), by tier", "s",
                          "Quantiles of the run's TTFT histogram (served attempts, from the send).", *quantiles))
        .with_panel(panel(
            "The load generator: in flight and loop lag", "short",
            "Per load process: requests in flight, and the event loop's lag in seconds (over ~0.05 s, TTFT "
            "measurements become doubtful; the audit judges it).",
            ("sum by (process) (rushhour_in_flight)", "{{process}} in flight"),
            ("max by (process) (rushhour_loop_lag_seconds)", "{{process}} loop lag (s)"),
            ("sum by (process) (rushhour_process_not_sent)", "{{process}} not sent (total)")))
        .with_row(row("vLLM (the model servers)"))
        .with_panel(panel(
            "Requests running and waiting", "short", "vLLM's scheduler: the running batch and the waiting queue.",
            ("sum by (model_name) (vllm:num_requests_running)", "{{model_name}} running"),
            ("sum by (model_name) (vllm:num_requests_waiting)", "{{model_name}} waiting")))
        .with_panel(panel(
            "Mean time in vLLM's queue, and KV cache use", "s",
            "vLLM's request queue time (its histogram's sum over count) and KV-cache usage (1 = full).",
            (f"sum by (model_name) (rate(vllm:request_queue_time_seconds_sum{RATE})) / sum by (model_name) "
             f"(rate(vllm:request_queue_time_seconds_count{RATE}))", "{{model_name}} queue (s)"),
            ("max by (model_name) (vllm:kv_cache_usage_perc)", "{{model_name}} KV cache")))
        .with_row(row("llm-d flow control (per priority band)"))
        .with_panel(panel(
            "Flow-control outcomes per second, by band", "reqps",
            "llm-d's flow control: requests leaving each priority band, by outcome (dispatched, rejected …).",
            (f"sum by (priority, outcome) (rate(llm_d_epp_flow_control_requests_total{RATE}))",
             "band {{priority}} {{outcome}}")))
        .with_panel(panel(
            "Queued per band, and mean time queued", "short",
            "Requests queued in each band now, and their mean time in flow control (seconds).",
            ("sum by (priority) (llm_d_epp_flow_control_queue_size)", "band {{priority}} queued"),
            (f"sum by (priority) (rate(llm_d_epp_flow_control_request_queue_duration_seconds_sum{RATE})) / "
             f"sum by (priority) (rate(llm_d_epp_flow_control_request_queue_duration_seconds_count{RATE}))",
             "band {{priority}} mean wait (s)"),
            ("max(llm_d_epp_flow_control_pool_saturation)", "pool saturation")))
    )


def board_json() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    return dict(json.loads(json.dumps(board().build(), cls=JSONEncoder)))


if __name__ == "__main__":
    sys.stdout.write(json.dumps(board_json(), indent=2, sort_keys=True) + "\n")
