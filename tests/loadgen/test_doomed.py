"""Fail fast, pure: which first attempts doom a run, and which never do (loadgen/doomed.py)."""

from __future__ import annotations

from typing import Any

from rushhour.loadgen.doomed import (
    CALIBRATION_MIN,
    DOOM_AFTER,
    REFUSED_AFTER,
    DoomWatch,
    Failure,
    explain,
    judge_attempts,
    with_models,
)

# vLLM 0.32's own words (vllm/entrypoints/serve/engine/serving.py _check_model), as the record keeps them
VLLM_404 = "The model `wrong` does not exist. Valid aliases: tiny-llama."
LITELLM_400 = ("/chat/completions: Invalid model name passed in model=wrong. "
               "Call `/v1/models` to view available models for your key.")
REFUSED = "ECONNREFUSED: Connection refused"


def rec(status: int = 200, error: str | None = None, **flags: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "request", "status": status, "error": error, "complete": status == 200,
                           "persona": "chat"}
    return {**out, **flags}


def watch(records: list[dict[str, Any]], after: int = DOOM_AFTER) -> dict[str, Any] | None:
    w = DoomWatch(after)
    for r in records:
        w.feed(r)
    return w.look(3.0)


def test_the_first_attempts_all_failing_alike_doom_the_run() -> None:
    found = watch([rec(404, VLLM_404)] * DOOM_AFTER)
    assert found is not None and found["stop_reason"] == "aborted_doomed" and found["attempts"] == DOOM_AFTER
    assert found["status"] == 404 and found["error"] == VLLM_404 and found["at_s"] == 3.0
    assert VLLM_404 in found["message"]
    assert watch([rec(404, VLLM_404)] * (DOOM_AFTER - 1)) is None  # not yet


def test_a_refused_connection_is_conclusive_sooner() -> None:
    refused = rec(0, REFUSED, transport_error=True)
    assert watch([refused] * REFUSED_AFTER) is not None
    assert watch([refused] * (REFUSED_AFTER - 1)) is None
    breaker = rec(0, None, reason="breaker_open")  # the client's own breaker: no new word from the target
    assert watch([refused, breaker, refused, breaker, refused]) is not None
    assert "refuses connections" in explain(Failure(0, REFUSED), 1)


def test_mixed_first_attempts_never_doom_a_run() -> None:
    """Flaky but fine: one success, another error or a busy answer among the first disarms the watch for good."""
    for other in (rec(200), rec(500, "boom"), rec(404, "The model `other` does not exist."), rec(429, "full"),
                  rec(503, "queue full"), rec(0, "client timeout", client_timeout=True)):
        records = [rec(404, VLLM_404)] * 3 + [other] + [rec(404, VLLM_404)] * (3 * DOOM_AFTER)
        assert watch(records) is None, other


def test_capacity_answers_are_measured_not_doomed() -> None:
    assert watch([rec(429, "rejected-saturated")] * (3 * DOOM_AFTER)) is None
    assert watch([rec(503, "Service Unavailable")] * (3 * DOOM_AFTER)) is None


def test_cancelled_not_sent_and_calibration_lines_do_not_count() -> None:
    noise = [rec(0, None, cancelled=True), rec(0, None, not_sent=True), rec(200, persona="calibration"),
             {"kind": "health"}]
    assert watch(noise + [rec(401, "bad key")] * DOOM_AFTER) is not None


def test_calibration_is_judged_whole() -> None:
    assert judge_attempts([rec(404, VLLM_404)] * CALIBRATION_MIN, CALIBRATION_MIN) is not None
    assert judge_attempts([rec(404, VLLM_404)] * (CALIBRATION_MIN - 1), CALIBRATION_MIN) is None
    assert judge_attempts([rec(0, REFUSED, transport_error=True)], CALIBRATION_MIN) is not None
    assert judge_attempts([rec(404, VLLM_404)] * 5 + [rec(200)], CALIBRATION_MIN) is None
    assert judge_attempts([rec(0, "client timeout", client_timeout=True)] * 5, CALIBRATION_MIN) is None
    assert judge_attempts([], CALIBRATION_MIN) is None


def test_an_unknown_model_names_what_is_served() -> None:
    for status, text in ((404, VLLM_404), (400, LITELLM_400)):
        found = judge_attempts([rec(status, text)] * 3, CALIBRATION_MIN)
        assert found is not None
        named = with_models(found, ["tiny-llama", "other"], "wrong")
        assert named["message"].startswith("model 'wrong' does not exist: served models are tiny-llama, other; "
                                           f"the target answered {status} {text}"), named["message"]
        assert named["served_models"] == ["tiny-llama", "other"]
    other = judge_attempts([rec(401, "Invalid API key")] * 3, CALIBRATION_MIN)
    assert other is not None and with_models(other, ["x"]) == other  # not a model error: nothing added


def test_with_a_fallback_every_route_must_fail() -> None:
    """A primary with the wrong model and a fallback that serves: the run measures the fallback."""
    primary = rec(404, VLLM_404, route="primary")
    w = DoomWatch(routes=("primary", "standby"))
    for r in [primary] * (2 * DOOM_AFTER):
        w.feed(r)
    assert w.look(1.0) is None  # the standby has not answered yet
    w.feed(rec(200, route="standby"))
    assert w.look(2.0) is None and w.disarmed
    both = DoomWatch(routes=("primary", "standby"))
    for r in [primary, rec(401, "bad key", route="standby")] * DOOM_AFTER:
        both.feed(r)
    found = both.look(3.0)
    assert found is not None and found["error"] == VLLM_404  # both dead, each its own way: the primary's words
