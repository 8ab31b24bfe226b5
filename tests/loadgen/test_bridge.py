"""One request bridge: Locust shows the same figure for an attempt, from `rushhour run` or a user's locustfile."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rushhour.records.record import RequestRecord

ENGINE = Path(__file__).resolve().parents[2] / "loadgen" / "engine"
MS = 1_000_000


def _record(**facts: Any) -> RequestRecord:
    rec = RequestRecord(run_id="r", seq=1, request_id="id", logical_id="l", tier="gold", tenant="t", persona="p")
    for name, value in facts.items():
        setattr(rec, name, value)
    return rec


def _fired(record: RequestRecord, stopping: bool = False) -> list[dict[str, Any]]:
    from rushhour.loadgen.engine.bridge import request_event

    events: list[dict[str, Any]] = []
    env = SimpleNamespace(events=SimpleNamespace(request=SimpleNamespace(fire=lambda **kw: events.append(kw))))
    request_event(env, lambda: stopping)(record)  # type: ignore[arg-type]
    return events


def test_a_served_stream_shows_its_time_to_first_token() -> None:
    [event] = _fired(_record(status=200, complete=True, sent_ns=0, first_token_ns=250 * MS, done_ns=900 * MS,
                             tokens=40, dialect="openai-chat"))
    assert (event["name"], event["response_time"], event["exception"]) == ("gold TTFT", 250.0, None)
    assert event["response_length"] == 40 and event["context"] == {"tenant": "t"}


def test_an_attempt_not_served_shows_its_whole_time_and_why() -> None:
    [event] = _fired(_record(status=429, reason="queue_full", sent_ns=0, done_ns=30 * MS))
    assert (event["name"], event["response_time"]) == ("gold", 30.0)
    assert str(event["exception"]) == "429 queue_full"
    [timeout] = _fired(_record(status=0, client_timeout=True, sent_ns=0, done_ns=5000 * MS))
    assert str(timeout["exception"]) == "client timeout"


def test_a_cancel_by_the_stop_fires_nothing_and_a_cancel_before_it_fails() -> None:
    cancelled = _record(status=0, cancelled=True, sent_ns=0, done_ns=MS)
    assert _fired(cancelled, stopping=True) == []
    assert str(_fired(cancelled)[0]["exception"]) == "cancelled (its user was stopped)"
    assert _fired(_record(not_sent=True)) == []


def test_both_entry_points_install_the_one_bridge_and_nothing_else_fires_requests() -> None:
    """The Locust child (`rushhour run`) and `rushhour.locust` (a user's locustfile) share the bridge: no module of
    the engine but bridge.py fires Locust's request event, and both import its `request_event`."""
    firing, importing = [], []
    for path in sorted(ENGINE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "fire" and "request" in ast.unparse(node.value):
                firing.append(path.name)
            if isinstance(node, ast.ImportFrom) and node.module == "rushhour.loadgen.engine.bridge":
                importing.append(path.name)
    assert sorted(set(firing)) == ["bridge.py"]
    assert sorted(importing) == ["locustfile.py", "users.py"]
