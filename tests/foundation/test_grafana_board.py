"""deploy/grafana/rushhour.json: built by Grafana's typed dashboard builders and decoded whole by Grafana's
dashboard model (grafana-foundation-sdk, generated from Grafana's published schemas; no Grafana runs here)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard
from support import load_script

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "deploy" / "grafana" / "rushhour.json"
# the metric names a PromQL expression of the board queries (rushhour's, vLLM's, llm-d's)
METRIC = re.compile(r"\b(rushhour_[a-z_]+|vllm:[a-z_]+|llm_d_epp_[a-z_]+)")


def board_metrics(board: dict[str, Any]) -> set[str]:
    """Every metric name the board's panels and variables query."""
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [str(v.get("query", "")) for v in board["templating"]["list"]]
    return {m for e in exprs for m in METRIC.findall(e)}


def _lost(original: Any, decoded: Any, path: str = "") -> list[str]:
    """What of ``original`` did not survive the model's decoding (a key it does not know, a value it changed)."""
    if isinstance(original, dict):
        if not isinstance(decoded, dict):
            return [path]
        return [p for k, v in original.items() for p in (_lost(v, decoded[k], f"{path}/{k}") if k in decoded
                                                          else [f"{path}/{k}"])]
    if isinstance(original, list):
        if not isinstance(decoded, list) or len(decoded) != len(original):
            return [path]
        return [p for i, (a, b) in enumerate(zip(original, decoded, strict=True)) for p in _lost(a, b, f"{path}[{i}]")]
    return [] if original == decoded else [path]


def _decoded(board: dict[str, Any]) -> dict[str, Any]:
    register_default_plugins()
    return dict(json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder)))


def test_the_shipped_board_is_the_builders_output() -> None:
    module = load_script("tools/grafana_board.py")
    assert json.loads(BOARD.read_text()) == module.board_json(), "run: .venv/bin/python tools/grafana_board.py " \
                                                                 "> deploy/grafana/rushhour.json"


def test_grafanas_dashboard_model_decodes_the_board_whole() -> None:
    board = json.loads(BOARD.read_text())
    assert _lost(board, _decoded(board)) == []
    planted = json.loads(BOARD.read_text())
    planted["panels"][1]["fieldConfg"] = {}  # a misspelt key: the model does not know it, and the check says so
    planted["panels"][2]["targets"][0]["exprr"] = "up"
    assert _lost(planted, _decoded(planted)) == ["/panels[1]/fieldConfg", "/panels[2]/targets[0]/exprr"]


def test_the_board_is_templated_and_every_panel_queries_the_chosen_source() -> None:
    board = json.loads(BOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["tier"]["type"] == "query" and variables["tier"]["includeAll"]
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    for p in panels:
        assert p["type"] == "timeseries" and p["targets"], p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), p["title"]
    tiered = [t["expr"] for p in panels for t in p["targets"] if "rushhour_attempts" in t["expr"]]
    assert tiered and all('tier=~"$tier"' in e for e in tiered)
    assert {"rushhour_attempts_total", "rushhour_ttft_seconds_bucket", "rushhour_in_flight",
            "vllm:num_requests_waiting", "llm_d_epp_flow_control_queue_size"} <= board_metrics(board)
