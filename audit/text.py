"""Numbers in sentences: the one place that formats durations, percentages and ratios.

The audit writes a few sentences itself (findings, verdict messages, compare's regressions, the
knee's and the study's answers); the reports format everything else. Both use these functions
(``reports/fmt.py`` re-exports them), so a value reads the same in a finding and in a table. No other
module of ``audit/`` formats a number for people.
"""

from __future__ import annotations

import math

DASH = "–"  # what a missing value reads as


def ms(value: float | None) -> str:
    """A duration given in ms, in the unit a person reads best: '0.42 ms', '410 ms', '2.10 s', '48.0 s', '12.0 min'."""
    if value is None:
        return DASH
    if value == 0:
        return "0"
    if value < 1:
        return f"{value:.2f} ms"
    if value < 1000:
        return f"{value:.0f} ms"
    if value < 10_000:
        return f"{value / 1000:.2f} s"
    if value < 600_000:
        return f"{value / 1000:.1f} s"
    return f"{value / 60_000:.1f} min"


def pct(value: float | None, digits: int | None = None) -> str:
    """A fraction as a percentage; by default 0 digits from 10 %, 1 from 1 %, 2 below."""
    if value is None:
        return DASH
    p = value * 100
    if digits is None:
        digits = 0 if (p == 0 or p >= 10 or p == 100) else (1 if p >= 1 else 2)
    return f"{p:.{digits}f} %"


def _unsigned_zero(value: float, digits: int) -> float:
    """0.0 for a value that rounds to zero at ``digits``: '+0 %', never '-0 %'."""
    return 0.0 if math.isfinite(value) and round(value, digits) == 0 else value


def signed_points(value: float | None) -> str:
    """A difference of two fractions in percentage points: '+1.5 pt'."""
    return DASH if value is None else f"{_unsigned_zero(value * 100, 1):+.1f} pt"


def signed_pct(value: float | None) -> str:
    """A relative change: '+12 %'."""
    return DASH if value is None else f"{_unsigned_zero(value * 100, 0):+.0f} %"


def times(value: float | None, digits: int = 1) -> str:
    """A ratio: '2.4×'."""
    return DASH if value is None else f"{value:.{digits}f}×"


def seconds(value: float) -> str:
    """A time or span in seconds, to a tenth: '8.4 s'."""
    return f"{value:.1f} s"


def rps(value: float | None) -> str:
    """A request rate: '12 req/s', '3.5 req/s'."""
    if value is None:
        return DASH
    return f"{value:.0f} req/s" if value >= 10 else f"{value:.1f} req/s"


def scale(value: float | None) -> str:
    """A load scale factor: '1.5×'."""
    return DASH if value is None else f"{value:.3g}×"


def p_value(value: float) -> str:
    """A p-value to three significant digits, '0.0312'; below 0.001 '< 0.001' (a printed 'p = 0' is never true)."""
    return "< 0.001" if value < 0.001 else f"{value:.3g}"


def p_clause(value: float) -> str:
    """A p-value in a sentence: 'p = 0.0312', 'p < 0.001'."""
    return "p " + (p_value(value) if value < 0.001 else "= " + p_value(value))


def whole(value: float) -> str:
    """A counter's value (floats in Prometheus) as a whole number: '1204'."""
    return f"{value:.0f}"


def tenths(value: float) -> str:
    """A measure to a tenth, without a unit (a load average): '3.4'."""
    return f"{value:.1f}"


def plain(value: float) -> str:
    """A number as a person typed it (a threshold, a scale): '2', '0.5', '1e+03'."""
    return f"{value:g}"


def money(value: float) -> str:
    """An amount in the user's currency (a GPU-hour price × hours): '1,234.50'."""
    return f"{value:,.2f}"
