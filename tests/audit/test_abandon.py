"""A user who gave up is its own class, ``abandoned``: not served, never the generator's ``cancelled`` flag."""

from __future__ import annotations

import random

import pandas as pd

from rushhour.audit.abandon import abandoned_by_persona
from rushhour.audit.classify import classify_frame, classify_one
from rushhour.audit.summary import POLICY_DROP_CLASSES, UNSERVED_CLASSES
from rushhour.loadgen.resilience import next_step, outcome_key
from rushhour.records.record import RequestRecord
from rushhour.scenarios.model import RetryPolicy


def test_abandoned_is_unserved_and_not_a_policy_drop() -> None:
    assert "abandoned" in UNSERVED_CLASSES and "abandoned" not in POLICY_DROP_CLASSES


def test_the_abandon_flag_wins_over_what_the_connection_showed() -> None:
    # headers of a 200 came, no token: the user left
    assert classify_one("vllm", status=200, abandoned=True) == "abandoned"
    assert classify_one("vllm", status=0, abandoned=True) == "abandoned"
    # the generator stopping is still unfinished, a client deadline still timeout
    assert classify_one("vllm", status=0, cancelled=True) == "unfinished"
    assert classify_one("vllm", status=0, client_timeout=True) == "timeout"
    assert classify_one("vllm", not_sent=True, abandoned=True) == "not_sent"


def test_frame_agrees_with_one() -> None:
    frame = pd.DataFrame({
        "status": [200, 0, 200, 0],
        "complete": [False, False, True, False],
        "abandoned": [True, True, False, False],
        "client_timeout": [False, False, False, True],
    })
    assert list(classify_frame(frame, "vllm").astype(str)) == ["abandoned", "abandoned", "served", "timeout"]


def test_abandoned_by_persona_counts_judged_final_classes() -> None:
    logical = pd.DataFrame({"persona": ["a", "a", "b", "b"], "cls": ["abandoned", "served", "abandoned", "not_sent"]})
    assert abandoned_by_persona(logical) == {"a": 1, "b": 1}


def test_no_retry_and_no_route_verdict_after_an_abandon() -> None:
    record = RequestRecord(run_id="r", seq=1, request_id="x", logical_id="x", tier="t", tenant="0", persona="p",
                           status=200, abandoned=True)
    assert outcome_key(record) == "abandoned"
    decision = next_step(RetryPolicy(on=["timeout", "incomplete"], max_attempts=3), record, 1, 0.1,
                         random.Random(0), 0)
    assert decision.action == "give_up"
