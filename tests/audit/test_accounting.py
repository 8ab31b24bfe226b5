"""Accounting that fails closed (issue 12): unclassified answers, unreachable targets, interrupted runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import MS, RunBuilder, S

from rushhour.audit import run_audit
from rushhour.audit.gates import EXIT_FAIL, EXIT_INVALID
from rushhour.audit.validity import dark_spans
from rushhour.reports import sentences

TIERS = [{"name": "interactive", "priority": 10, "slo": {"max_drop_rate": 0.05}}]
NO_ANSWER = {"status": 0, "complete": False, "headers_ns": None, "first_token_ns": None, "last_token_ns": None}


def test_unknown_503_is_unclassified_named_and_not_served(tmp_path: Path) -> None:
    """Before: a 503 no rule knew was `failed` and left max_drop_rate at 0 %; vLLM's 503s were hidden."""
    b = RunBuilder(tmp_path, tiers=TIERS, profile="vllm", duration_s=20)
    for i in range(51):
        b.dropped(status=503, error="The engine is currently busy, please retry the request later on.",
                  tier="interactive", persona="chat-interactive", sent_ns=i * S // 4)
    for i in range(10):
        b.request(tier="interactive", persona="chat-interactive", sent_ns=15 * S + i * MS)
    s = run_audit(b.close())
    tier = s.tier("interactive")
    assert tier.by_class["unclassified"] == 51 and tier.unserved == 51
    assert tier.drop_rate.k == 51 and tier.drop_rate.n == 61 and tier.policy_drop_rate.k == 0
    (f,) = [f for f in s.findings if f.kind == "unclassified"]
    assert f.severity == "error" and f.tier == "interactive"
    assert f.message.startswith('51 × 503 "The engine is currently busy')
    assert "…" in f.message and "no rule for profile vllm" in f.message
    assert s.exit_code == EXIT_FAIL
    assert any("no rule for profile vllm" in line for line in sentences.headline(s))


def test_dark_spans_are_cut_by_answers() -> None:
    sent = np.array([0, 1, 2, 3, 4, 5], dtype=float) * S
    end = sent + 0.1 * S
    dark = np.array([False, True, True, True, True, False])
    (span,) = dark_spans(sent, end, dark, np.array([0.05 * S, 5.05 * S]))
    assert span[0] == 1 * S and span[1] == pytest.approx(4.1 * S) and span[2] == 4
    # an answer inside the span (a slow stream's headers) splits it
    (span,) = dark_spans(sent, end, dark, np.array([2.5 * S]))
    assert span[0] == 2.5 * S and span[1] == pytest.approx(4.1 * S)


def test_target_unreachable_for_most_of_the_run_is_invalid(tmp_path: Path) -> None:
    """Before: only a run with *no* answer at all was invalid; 72 of 73 transport errors passed."""
    b = RunBuilder(tmp_path, tiers=TIERS, duration_s=30)
    b.request(tier="interactive", persona="chat-interactive", sent_ns=S)
    for i in range(72):
        sent = int(5.2 * S) + i * S // 3
        b.request(tier="interactive", persona="chat-interactive", sent_ns=sent, transport_error=True,
                  error="ECONNREFUSED", done_ns=sent + MS, **NO_ANSWER)
    s = run_audit(b.close())
    assert not s.validity.valid and s.exit_code == EXIT_INVALID
    reason = next(r for r in s.validity.reasons if r.startswith("target unreachable"))
    assert "from 5.2 s to 28.9 s" in reason and "72 of 73 attempts got no HTTP answer" in reason


def test_most_attempts_unanswered_is_invalid(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS, duration_s=60)
    for i in range(20):  # short dark bursts between answers: no long span, but 2 of 3 unanswered
        b.request(tier="interactive", persona="chat-interactive", sent_ns=3 * i * S)
        for j in (1, 2):
            sent = (3 * i + j) * S
            b.request(tier="interactive", persona="chat-interactive", sent_ns=sent, transport_error=True,
                      error="ECONNRESET", done_ns=sent + MS, **NO_ANSWER)
    s = run_audit(b.close())
    assert any("40 of 60 attempts (67 %) got no HTTP answer" in r for r in s.validity.reasons), s.validity.reasons


def test_a_short_outage_is_not_invalid(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS, duration_s=60)
    for i in range(60):
        sent = i * S
        if 10 <= i < 13:
            b.request(tier="interactive", persona="chat-interactive", sent_ns=sent, transport_error=True,
                      done_ns=sent + MS, **NO_ANSWER)
        else:
            b.request(tier="interactive", persona="chat-interactive", sent_ns=sent)
    s = run_audit(b.close())
    assert s.validity.valid, s.validity.reasons
    assert s.tier("interactive").by_class["transport"] == 3 and s.tier("interactive").drop_rate.k == 3


def test_interrupted_run_says_so(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS, duration_s=20)
    for i in range(10):
        b.request(tier="interactive", persona="chat-interactive", sent_ns=i * S)
    run = b.close()
    manifest = json.loads((run / "run.json").read_text())
    manifest["stop_reason"] = "interrupted"
    (run / "run.json").write_text(json.dumps(manifest))
    s = run_audit(run)
    assert s.run.interrupted and s.run.stop_reason == "interrupted"
    assert "the run was interrupted (stop reason: interrupted)" in sentences.verdict_line(s)
    manifest["stop_reason"] = "completed"
    (run / "run.json").write_text(json.dumps(manifest))
    s = run_audit(run)
    assert not s.run.interrupted and "interrupted" not in sentences.verdict_line(s)
