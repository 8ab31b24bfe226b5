"""The run history's between-run test: a Student-t prediction interval of the window's runs (pure)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rushhour.studies.between import MIN_RUNS, above, change, finite, practical, prediction_interval


def test_linear_interval_is_mean_plus_minus_t_s_sqrt_one_plus_one_over_k() -> None:
    iv = prediction_interval([100.0, 110.0, 90.0])
    half = 4.302653 * 10.0 * math.sqrt(1 + 1 / 3)  # t(0.975, 2) = 4.3027
    assert iv.usable and iv.n == 3 and iv.scale == "linear" and iv.center == pytest.approx(100.0)
    assert iv.sd == pytest.approx(10.0)
    assert (iv.low, iv.high) == (pytest.approx(100 - half, rel=1e-4), pytest.approx(100 + half, rel=1e-4))


def test_log_interval_is_symmetric_in_ratio_around_the_geometric_mean() -> None:
    iv = prediction_interval([50.0, 100.0, 200.0], log=True)
    assert iv.scale == "log" and iv.center == pytest.approx(100.0)
    assert iv.high is not None and iv.low is not None and iv.low > 0
    assert iv.high / 100.0 == pytest.approx(100.0 / iv.low)


def test_fewer_than_three_values_give_no_interval() -> None:
    for values in ([], [100.0], [100.0, 110.0]):
        iv = prediction_interval(values, log=True)
        assert not iv.usable and iv.low is None and iv.high is None and iv.n == len(values)
        assert f"{MIN_RUNS} needed" in iv.note
        assert above(1e9, iv) is None  # no interval: the between-run test has no opinion


def test_none_and_nan_values_are_left_out() -> None:
    assert finite([1.0, None, math.nan, math.inf, 2.0]) == [1.0, 2.0]
    with_gaps = prediction_interval([100.0, None, math.nan, 110.0, 90.0])
    assert with_gaps == prediction_interval([100.0, 110.0, 90.0])
    assert not prediction_interval([100.0, None, math.nan]).usable  # one value left: no spread


def test_zero_variance_window_is_a_point_and_any_rise_is_outside() -> None:
    iv = prediction_interval([0.0, 0.0, 0.0, 0.0], lower=0.0, upper=1.0)
    assert iv.usable and iv.sd == 0 and iv.low == iv.high == 0.0 and "agree exactly" in iv.note
    assert above(0.0, iv) is False and above(0.001, iv) is True
    same = prediction_interval([250.0] * 3, log=True)
    assert same.low == pytest.approx(250.0) and same.high == pytest.approx(250.0)


def test_a_value_at_or_below_zero_falls_back_to_the_linear_scale() -> None:
    iv = prediction_interval([0.0, 10.0, 20.0], log=True)
    assert iv.scale == "linear" and "linear" in iv.note and iv.center == pytest.approx(10.0)


def test_rates_are_clipped_to_zero_and_one() -> None:
    iv = prediction_interval([0.0, 0.02, 0.0], lower=0.0, upper=1.0)
    assert iv.low == 0.0 and iv.high is not None and 0.02 < iv.high < 1.0


def test_newest_missing_or_nan_is_not_judged() -> None:
    iv = prediction_interval([1.0, 2.0, 3.0])
    assert above(None, iv) is None and above(math.nan, iv) is None


def test_change_and_practical_minimum() -> None:
    assert change(110.0, 100.0, relative=True) == pytest.approx(0.10)
    assert change(0.03, 0.01, relative=False) == pytest.approx(0.02)
    assert change(None, 100.0, relative=True) is None and change(5.0, None, relative=True) is None
    assert change(5.0, 0.0, relative=True) == math.inf and change(0.0, 0.0, relative=True) == 0.0
    assert practical(0.11, 0.10) and not practical(0.10, 0.10) and not practical(None, 0.10)


def test_the_interval_holds_a_further_run_95_percent_of_the_time() -> None:
    """Monte Carlo: K = 5 normal runs, one more; a mean's interval (no √(1 + 1/K)) would cover far less."""
    rng = np.random.default_rng(17)
    trials, inside = 4000, 0
    for _ in range(trials):
        draws = rng.normal(100.0, 15.0, 6)
        iv = prediction_interval(list(draws[:5]))
        assert iv.low is not None and iv.high is not None
        inside += iv.low <= draws[5] <= iv.high
    assert 0.935 <= inside / trials <= 0.965
