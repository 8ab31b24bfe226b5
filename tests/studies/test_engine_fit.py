"""The replica model's fit (studies/engine_fit.py): known coefficients come back inside their intervals from
noisy synthetic probes; an engine whose step time grows with the square of the batch is refused; the rows a
run's requests make count the other requests in flight."""

from __future__ import annotations

import numpy as np
import pytest

from rushhour.studies.engine_fit import COEFFICIENTS, FitError, Measured, Observation, fit, observations, predict

TRUE = {"base_s": 0.004, "per_seq_s": 0.0006, "per_kv_token_s": 2.0e-7, "prefill_per_token_s": 3.0e-5,
        "prefill_step_s": 0.012}


def _probes(step: object, noise: float = 0.02, seed: int = 1) -> list[Observation]:
    """Prefill probes (one request alone, growing prompts) and decode probes (N streams together, two contexts),
    timed by ``step(decode_seqs, kv, prefill)`` with multiplicative noise."""
    rng = np.random.default_rng(seed)
    out = []
    for prompt in (16, 64, 128, 256, 512, 768, 1024, 1536):
        for _rep in range(3):
            secs = step(0, prompt, prompt) * (1 + rng.normal(0, noise))  # type: ignore[operator]
            out.append(Observation(f"prefill-{prompt}", "prefill", 1, 0, prompt, prompt, 1, secs))
    for n in (1, 2, 3, 4, 6, 8):
        for prompt in (32, 1024):
            steps, tokens = 63, 64
            kv_step = n * (prompt + (tokens + 1) / 2)
            for _rep in range(n):
                secs = steps * step(n, kv_step, 0) * (1 + rng.normal(0, noise))  # type: ignore[operator]
                out.append(Observation(f"decode-{n}x{prompt}", "decode", steps, steps * n, steps * kv_step, 0, 0, secs))
    return out


def _linear(seqs: float, kv: float, prefill: float) -> float:
    return (TRUE["base_s"] + TRUE["per_seq_s"] * seqs + TRUE["per_kv_token_s"] * kv
            + TRUE["prefill_per_token_s"] * prefill + (TRUE["prefill_step_s"] if prefill else 0.0))


HELD = {"prefill-128", "prefill-1536", "decode-3x32", "decode-8x1024", "decode-6x32"}


def test_known_coefficients_come_back_within_their_intervals() -> None:
    result = fit(_probes(_linear), HELD)
    for name in COEFFICIENTS:
        low, high = result.intervals[name]
        assert low <= TRUE[name] <= high, (name, result.intervals[name], result.coefficients[name])
        assert low < result.coefficients[name] < high
    assert result.mape < 0.05 and result.pearson_r is not None and result.pearson_r > 0.99
    assert result.noise_mape is not None and 0.005 < result.noise_mape < 0.03  # the 2 % noise the probes were given
    assert result.heldout_n == 3 + 3 + 8 + 3 + 6 and {k.kind for k in result.kinds} == {"prefill", "decode"}
    obs = Observation("x", "decode", 10, 40, 5000, 0, 0, 1.0)
    assert predict(result.coefficients, obs) == pytest.approx(
        sum(result.coefficients[c] * v for c, v in zip(COEFFICIENTS, obs.row(), strict=True)))


def test_an_engine_slowing_with_the_square_of_the_batch_is_refused() -> None:
    def quadratic(seqs: float, kv: float, prefill: float) -> float:
        return 0.002 + 0.0015 * seqs * seqs + TRUE["prefill_per_token_s"] * prefill

    with pytest.raises(FitError, match="does not carry this engine") as err:
        fit(_probes(quadratic), HELD)
    assert err.value.fit is not None and err.value.fit.mape > 0.2, err.value.fit


def test_probes_that_never_vary_the_batch_are_refused() -> None:
    only_prefill = [o for o in _probes(_linear) if o.kind == "prefill"]
    with pytest.raises(FitError, match="never exercised per_seq_s"):
        fit(only_prefill, HELD)


def test_rows_count_the_other_requests_in_flight() -> None:
    ms = 1_000_000
    a = Measured("d", 100, 11, first_token_ns=10 * ms, last_token_ns=110 * ms, prefill_s=0.01, itl_s=0.01)
    b = Measured("d", 300, 11, first_token_ns=10 * ms, last_token_ns=110 * ms, prefill_s=0.01, itl_s=0.01)
    late = Measured("d", 50, 2, first_token_ns=60 * ms, last_token_ns=70 * ms, prefill_s=0.005, itl_s=0.01)
    rows = {(o.kind, o.seconds, o.prefill_tokens): o for o in observations([a, b, late], 2048)}
    dec_a = next(o for o in observations([a, b, late], 2048) if o.kind == "decode" and o.kv_tokens < 10_000)
    assert dec_a.steps == 10 and dec_a.decode_seqs == pytest.approx(10 + 10 + 1)  # b all along, late for 1 step
    assert dec_a.prefill_tokens == 50 and dec_a.prefill_steps == 1  # late's prompt was computed in one of a's steps
    pre_a = next(o for o in rows.values() if o.kind == "prefill" and o.prefill_tokens == 400)  # a and b together
    assert pre_a.steps == 1 and pre_a.decode_seqs == 0
    pre_late = next(o for o in rows.values() if o.kind == "prefill" and o.prefill_tokens == 50)
    assert pre_late.decode_seqs == 2  # a and b were decoding when late's first token came
    chunked = observations([Measured("p", 5000, 1, 0, 0, 0.5, None)], 2048)
    assert [(o.steps, o.kv_tokens, o.prefill_steps) for o in chunked] == [(3, 2048 + 4096 + 5000, 3)]
