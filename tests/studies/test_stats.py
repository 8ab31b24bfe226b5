"""Pure statistics of ``studies.compare`` against textbook values."""

from __future__ import annotations

import numpy as np
import pytest

from rushhour.studies.compare import (
    bootstrap_quantile_diff,
    holm,
    is_regression,
    mann_whitney_u,
    two_proportion_z,
)


def test_mann_whitney_textbook() -> None:
    # scipy.stats.mannwhitneyu docs (Conover): males vs females, U = 17, asymptotic p = 0.1113
    males = [19, 22, 16, 29, 24]
    females = [20, 11, 17, 12]
    res = mann_whitney_u(females, males)  # U of the second sample: pairs where male > female
    assert res.u == 17
    assert res.p == pytest.approx(0.11134688653314041, abs=1e-6)
    assert res.prob_superiority == pytest.approx(17 / 20)
    other = mann_whitney_u(males, females)
    assert other.u == 3
    assert other.p == pytest.approx(res.p)


def test_mann_whitney_one_sided_and_ties() -> None:
    base = [1, 2, 2, 3, 3, 3, 4]
    cand = [3, 4, 4, 5, 5, 6, 6]
    greater = mann_whitney_u(base, cand, "greater")
    less = mann_whitney_u(base, cand, "less")
    assert greater.p < 0.01 < less.p
    # tie-corrected variance: all values equal -> no evidence at all
    flat = mann_whitney_u([5, 5, 5], [5, 5, 5])
    assert flat.p == 1.0 and flat.prob_superiority == 0.5


def test_two_proportion_textbook() -> None:
    res = two_proportion_z(45, 100, 56, 100)
    assert res.z == pytest.approx(1.5557, abs=1e-3)
    assert res.p == pytest.approx(0.1198, abs=5e-4)
    # Newcombe (1998) example, method 10: 56/70 vs 48/80 -> 0.2000 (0.0524, 0.3339)
    nc = two_proportion_z(48, 80, 56, 70)
    assert nc.diff == pytest.approx(0.2)
    assert nc.low == pytest.approx(0.0524, abs=5e-4)
    assert nc.high == pytest.approx(0.3339, abs=5e-4)
    assert two_proportion_z(0, 100, 0, 100).p == 1.0


def test_wilson_textbook() -> None:
    from rushhour.audit.stats import wilson

    r = wilson(81, 263)  # Wilson (1927) / Agresti-Coull example: 0.2553 … 0.3662
    assert r.low == pytest.approx(0.2553, abs=5e-4)
    assert r.high == pytest.approx(0.3662, abs=5e-4)


def test_newcombe_interval_uses_the_one_wilson_interval() -> None:
    """compare's difference interval is built on audit.stats.wilson (one Wilson, exact at k = 0 and k = n)."""
    from rushhour.studies import compare

    assert not hasattr(compare, "wilson_interval")
    tp = two_proportion_z(0, 50, 50, 50, "greater")
    # Newcombe: diff ± sqrt((p2 − l2)² + (u1 − p1)²): with k=0 and k=n the exact ends are 0 and 1
    from rushhour.audit.stats import wilson

    u1, l2 = wilson(0, 50).high, wilson(50, 50).low
    assert u1 is not None and l2 is not None
    assert tp.low == pytest.approx(1.0 - (u1 ** 2 + (1 - l2) ** 2) ** 0.5)
    assert tp.high == pytest.approx(1.0)


def test_holm() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == []


def test_bootstrap_detects_shift_and_ignores_noise() -> None:
    rng = np.random.default_rng(1)
    base = rng.lognormal(6.0, 0.6, 2000)
    same = rng.lognormal(6.0, 0.6, 2000)
    slow = rng.lognormal(6.0, 0.6, 2000) * 1.5
    noise = bootstrap_quantile_diff(base, same, 0.99, n_boot=1000, seed=3)
    shift = bootstrap_quantile_diff(base, slow, 0.99, n_boot=1000, seed=3)
    assert noise.p_greater > 0.05
    assert noise.low < 0 < noise.high
    assert shift.p_greater < 0.01
    assert shift.rel == pytest.approx(0.5, abs=0.2)
    assert shift.rel_low > 0
    again = bootstrap_quantile_diff(base, slow, 0.99, n_boot=1000, seed=3)
    assert again == shift  # seeded


def test_block_bootstrap_is_wider_on_autocorrelated_samples() -> None:
    rng = np.random.default_rng(2)
    walk = np.abs(np.cumsum(rng.normal(0, 1, 1500))) + 10  # a queue that drifts: strong autocorrelation
    iid = bootstrap_quantile_diff(walk, walk, 0.99, n_boot=800, seed=1, block=1)
    blocks = bootstrap_quantile_diff(walk, walk, 0.99, n_boot=800, seed=1)
    assert (blocks.high - blocks.low) > (iid.high - iid.low)


@pytest.mark.parametrize(
    ("p", "worse", "threshold", "expected"),
    [(0.001, 0.25, 0.10, True), (0.001, 0.05, 0.10, False), (0.2, 0.5, 0.10, False), (0.049, 0.011, 0.01, True)],
)
def test_regression_rule(p: float, worse: float, threshold: float, expected: bool) -> None:
    assert is_regression(p, worse, threshold, 0.05) is expected
