"""audit.doctor: the judgement of the doctor's probes, on hand-built records with known answers."""

from __future__ import annotations

from typing import Any

from rushhour.audit.doctor import DoctorInput, exit_code, first_of_pair, judge, polarity_verdict

MS = 1_000_000


def rec(
    persona: str,
    tier: str,
    *,
    status: int = 200,
    sent: float = 0,
    first: float | None = 5,
    complete: bool = True,
    error: str | None = None,
    usage: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """A probe record; times in ms."""
    out: dict[str, Any] = {
        "persona": persona,
        "tier": tier,
        "status": status,
        "complete": complete,
        "error": error,
        "sent_ns": int(sent * MS),
        "first_token_ns": None if first is None else int((sent + first) * MS),
        "tokens": 4,
        "prompt_tokens": 64 if usage else None,
        "output_tokens": 4 if usage else None,
    }
    out.update(extra)
    return out


def pair(trial: str, high_ttft: float, low_ttft: float, high_sent: float, low_sent: float) -> list[dict[str, Any]]:
    return [
        rec(f"doctor-polarity-{trial}-high", "hi", sent=high_sent, first=high_ttft),
        rec(f"doctor-polarity-{trial}-low", "lo", sent=low_sent, first=low_ttft),
    ]


def healthy(**changes: Any) -> DoctorInput:
    records = [
        rec("doctor-tier", "hi"),
        rec("doctor-tier", "lo"),
        *pair("a", 200, 2400, 20, 0),
        *pair("b", 200, 2400, 0, 20),
        rec(
            "doctor-error-max-tokens",
            "hi",
            status=400,
            first=None,
            complete=False,
            error="This model's maximum context length is 4096 tokens",
        ),
        rec("doctor-error-model", "hi", status=404, first=None, complete=False, error="model does not exist"),
    ]
    base = DoctorInput(
        profile="vllm",
        target="http://127.0.0.1:1",
        tiers={"hi": 100, "lo": -1},
        records=records,
        metrics_found=["vllm:request_success_total"],
        metrics_wanted=["vllm:request_success_total"],
        model="tiny",
        models=["tiny"],
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def status_of(checks: list, name: str) -> str:  # type: ignore[type-arg]
    return next(c.status for c in checks if c.name == name)


def test_healthy_stack_passes() -> None:
    checks = judge(healthy())
    assert exit_code(checks) == 0, checks
    assert status_of(checks, "priority polarity") == "pass"


def test_unreachable_fails() -> None:
    inp = healthy(
        records=[
            rec(
                "doctor-tier",
                "hi",
                status=0,
                first=None,
                complete=False,
                transport_error=True,
                error="connection refused",
            )
        ]
    )
    checks = judge(inp)
    assert exit_code(checks) == 1 and "connection refused" in checks[0].detail


def test_wrong_model_fails() -> None:
    checks = judge(healthy(model="other"))
    assert status_of(checks, "model") == "fail" and exit_code(checks) == 1
    assert "model 'other' is not served (served: tiny): pass --model tiny" in checks[1].detail


def test_a_wrong_model_alone_blames_no_tier() -> None:
    inp = healthy(model="other")
    for record in inp.records:  # the stack refuses every probe for its model, as a real one would
        record.update(status=404, first_token_ns=None, complete=False, error="The model `other` does not exist.")
    checks = judge(inp)
    failed = [c.name for c in checks if c.status == "fail"]
    assert failed == ["model"], checks
    assert not any("mapping" in c.detail or c.name.startswith("tier ") for c in checks), checks


def test_refused_tier_fails() -> None:
    inp = healthy()
    inp.records[1] = rec(
        "doctor-tier", "lo", status=400, first=None, complete=False, error="Priority scheduling is not enabled."
    )
    checks = judge(inp)
    assert status_of(checks, "tier lo") == "fail" and "not accepted" in next(
        c.detail for c in checks if c.name == "tier lo"
    )


def test_stream_without_end_marker_fails() -> None:
    inp = healthy()
    inp.records[0] = rec("doctor-tier", "hi", complete=False, error="stream ended without [DONE]")
    assert status_of(judge(inp), "streams end") == "fail"


def test_missing_usage_warns_only() -> None:
    inp = healthy()
    inp.records[0] = rec("doctor-tier", "hi", usage=False)
    checks = judge(inp)
    assert status_of(checks, "usage") == "warn" and exit_code(checks) == 0


def test_reversed_polarity_fails() -> None:
    inp = healthy()
    inp.records[2:6] = [*pair("a", 2400, 200, 20, 0), *pair("b", 2400, 200, 0, 20)]
    checks = judge(inp)
    assert status_of(checks, "priority polarity") == "fail" and exit_code(checks) == 1


def test_fifo_is_a_warning_and_no_queue_is_info() -> None:
    inp = healthy()
    inp.records[2:6] = [*pair("a", 2400, 2400, 20, 0), *pair("b", 2400, 2400, 0, 20)]
    assert status_of(judge(inp), "priority polarity") == "warn"
    inp.records[2:6] = [*pair("a", 6, 6, 20, 0), *pair("b", 6, 6, 0, 20)]
    checks = judge(inp)
    assert status_of(checks, "priority polarity") == "info"
    # one trial without queueing is enough for the note, so it must not read "in both trials"
    detail = next(c.detail for c in checks if c.name == "priority polarity")
    assert detail.startswith("a trial saw no queueing") and "--fillers" in detail


def test_the_servers_engine_queue_says_whether_a_trial_queued() -> None:
    inp = healthy()
    # late at the client (28 ms against 5 ms idle) but never in the engine's queue: a seat was free, nothing to order
    inp.records[2:6] = [*pair("a", 28, 16, 20, 0), *pair("b", 200, 2400, 0, 20)]
    for record in inp.records[2:6]:
        record["metrics_queue_time_ms"] = 0.2
    assert status_of(judge(inp), "priority polarity") == "info"
    for record in inp.records[2:6]:  # the engine held them: the same order is now judged
        record["metrics_queue_time_ms"] = 150.0
    assert status_of(judge(inp), "priority polarity") == "warn"


def test_polarity_rules() -> None:
    assert polarity_verdict({"a": "high", "b": "high"}) == "honoured"
    assert polarity_verdict({"a": "low", "b": "low"}) == "reversed"
    assert polarity_verdict({"a": "low", "b": "high"}) == "ignored"
    assert polarity_verdict({"a": "tie", "b": "tie"}) == "ignored"
    assert polarity_verdict({"a": "high", "b": "low"}) is None
    # each trial tells one thing apart; a tie in the other one does not contradict it (seen on real vLLM under
    # load: trial a high 98 ms / low 145 ms, trial b 372 / 378 ms, the pair admitted together)
    assert polarity_verdict({"a": "high", "b": "tie"}) == "honoured"
    assert polarity_verdict({"a": "tie", "b": "low"}) == "reversed"
    assert polarity_verdict({"a": "tie", "b": "high"}) == "ignored"
    assert polarity_verdict({"a": "low", "b": "tie"}) == "ignored"
    assert polarity_verdict({"a": None, "b": "high"}) is None
    # within a tenth of the shorter wait: one batch, no order
    assert first_of_pair(rec("x", "hi", sent=0, first=1000), rec("x", "lo", sent=0, first=1050)) == "tie"
    assert first_of_pair(rec("x", "hi", sent=0, first=100), rec("x", "lo", sent=0, first=1100)) == "high"


def test_unreadable_metrics_warn_without_failing() -> None:
    checks = judge(healthy(metrics_error="HTTP 401", metrics_found=[]))
    assert status_of(checks, "metrics") == "warn" and exit_code(checks) == 0


TOOLS_400 = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


def test_tools_refused_fails_with_the_fix_and_tools_served_passes() -> None:
    refused = healthy()
    refused.records.append(rec("doctor-tools", "hi", status=400, first=None, complete=False, error=TOOLS_400))
    checks = judge(refused)
    line = next(c for c in checks if c.name == "tools")
    assert line.status == "fail"
    assert line.detail.startswith("server refuses tools: start vLLM with --enable-auto-tool-choice --tool-call-parser")
    assert exit_code(checks) == 1
    assert status_of(checks, "recognised answers") == "pass"  # a known answer (failed), not an unknown one
    ok = healthy()
    ok.records.append(rec("doctor-tools", "hi"))
    ok.records.append(rec("doctor-tools", "hi", route="backup", status=400, first=None, complete=False,
                          error="tools are not supported"))
    checks = judge(ok)
    assert status_of(checks, "tools") == "pass"
    assert status_of(checks, "tools (backup)") == "fail"  # an unnamed refusal still fails, with its text
    assert not any(c.name.startswith("tools") for c in judge(healthy()))  # no tools offered: no check


def test_a_target_that_is_no_url_is_one_line() -> None:
    import pytest

    from rushhour.loadgen.diagnose import DoctorError, prepare

    with pytest.raises(DoctorError) as err:  # was "1 validation error for Scenario" and nothing else
        prepare(None, target="ftp://x", profile="vllm", model=None, metrics=None)
    assert str(err.value) == "--target: url must be 'testbed' or start with http:// or https://"
