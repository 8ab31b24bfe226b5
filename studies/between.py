"""Between-run judgement of the run history: each run's figure is one observation (pure).

``rushhour history`` asks whether the newest run is worse than the runs before it. Inside one run,
compare's tests see thousands of requests and call a 5 % shift significant, but two runs of the same
stack differ by more than that for ordinary reasons (another load-generator seed, a noisy neighbour):
run-to-run variance. So a figure (a tier's not-served rate, TTFT p50, TTFT p99, E2E p99) regresses
only when three things hold:

1. **between runs**: the newest run's figure lies above the upper end of a 95 % Student-t
   *prediction interval* of the window's runs, ``mean ± t(0.975, K−1) · s · √(1 + 1/K)`` — the range
   a further run of the same stack falls in 95 % of the time, given K runs of it. Latencies are taken
   on the log scale (run-to-run noise stretches times by a factor; the interval then reads as ratios
   and never reaches below zero) and the centre is the geometric mean; the not-served rate (often
   exactly 0) stays on its own scale, clipped to [0, 1];
2. **within the run**: compare's own test of that figure is significant (``studies/compare.py``);
3. **practically**: the change against the window's centre exceeds a minimum the user sets
   (``--min-change``, +10 %, and ``--min-latency-ms``, +25 ms, for latencies: a few ms at p99 is a busy
   host's jitter however large in percent; ``--min-drop-change``, +1 point for not served).

Why a t prediction interval and not median ± MAD: with the 3–10 runs of a CI window the MAD is
coarse (with three runs it is the distance of one run to the median, often near 0) and has no
small-sample coverage, while the t interval widens honestly as K shrinks (t(0.975, 2) = 4.30). A single
wild run in the window widens it: a missed alarm, never a false one, and the page shows the values.
With fewer than three runs carrying the figure there is no spread to speak of: the figure falls back
to compare's within-run test alone, and the result says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from rushhour.audit import text
from rushhour.studies.repeat import t_quantile

MIN_RUNS = 3  # fewer window runs with a value: no between-run spread, the within-run test alone decides
LEVEL = 0.95  # two-sided level of the prediction interval; a regression is above its upper end
Scale = Literal["log", "linear"]


@lru_cache(maxsize=64)
def _t(df: int, level: float) -> float:
    return t_quantile((1 + level) / 2, df)


@dataclass(frozen=True)
class Interval:
    """A prediction interval for one further run's figure, from the window's runs."""

    n: int  # window runs with a finite value
    center: float | None  # the mean (linear) or the geometric mean (log)
    sd: float | None  # the runs' standard deviation on the scale used (log: of ln values)
    low: float | None
    high: float | None
    scale: Scale
    note: str = ""  # why there is no interval, or what is special about it

    @property
    def usable(self) -> bool:
        """There is an upper end to judge against."""
        return self.high is not None


def finite(values: Sequence[float | None]) -> list[float]:
    """The values that are numbers (None, NaN and infinities left out)."""
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def prediction_interval(values: Sequence[float | None], *, log: bool = False, level: float = LEVEL,
                        lower: float | None = None, upper: float | None = None) -> Interval:
    """The Student-t prediction interval of one more draw: mean ± t(level, n−1) · s · √(1 + 1/n).

    ``log``: on ln(values), back-transformed (falls back to the linear scale when a value is ≤ 0).
    Fewer than ``MIN_RUNS`` finite values: no interval. All values equal: the interval is that value.
    """
    have = finite(values)
    n = len(have)
    scale: Scale = "log" if log else "linear"
    note = ""
    if log and any(v <= 0 for v in have):
        scale, note = "linear", "a value ≤ 0: taken on the linear scale"
    if n < MIN_RUNS:
        center = (sum(have) / n) if n else None
        why = f"{n} of the window's runs have a value, {MIN_RUNS} needed for a run-to-run spread"
        return Interval(n, center, None, None, None, scale, why)
    xs = [math.log(v) for v in have] if scale == "log" else have
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = _t(n - 1, level) * sd * math.sqrt(1 + 1 / n)
    low, high = mean - half, mean + half
    if scale == "log":
        mean, low, high = math.exp(mean), math.exp(low), math.exp(high)
    if lower is not None:
        low = max(lower, low)
    if upper is not None:
        high = min(upper, high)
    if sd == 0:
        note = "the window's runs agree exactly: no run-to-run spread seen, any rise is outside"
    return Interval(n, mean, sd, low, high, scale, note)


def above(value: float | None, interval: Interval) -> bool | None:
    """The newest value lies above the interval's upper end; None when either is missing."""
    if value is None or not math.isfinite(value) or interval.high is None:
        return None
    return value > interval.high


def change(value: float | None, center: float | None, relative: bool) -> float | None:
    """The newest value against the window's centre: a ratio − 1 (latencies) or a difference (rates)."""
    if value is None or center is None or not math.isfinite(value):
        return None
    if relative:
        return value / center - 1 if center > 0 else (math.inf if value > 0 else 0.0)
    return value - center


def practical(delta: float | None, minimum: float) -> bool:
    """The change is worse by more than the practical minimum."""
    return delta is not None and delta > minimum


@dataclass(frozen=True)
class Figure:
    """One figure the history judges per tier."""

    key: str  # the trend table's column
    label: str  # how a sentence names it
    latency: bool  # ms, log scale, relative change; else a rate, linear, change in points
    compare_metric: str | None  # compare's gated test of it (None: its Mann-Whitney shift)


FIGURES = (
    Figure("drop_rate", "not served", False, "drop_rate"),
    Figure("ttft_p50_ms", "TTFT p50", True, None),
    Figure("ttft_p99_ms", "TTFT p99", True, "ttft_p99"),
    Figure("e2e_p99_ms", "E2E p99", True, "e2e_p99"),
)


def value_text(figure: Figure, value: float | None) -> str:
    """A figure's value as a sentence writes it."""
    return text.ms(value) if figure.latency else text.pct(value)


def change_text(figure: Figure, delta: float | None) -> str:
    """A change as a sentence writes it: '+23 %' or '+1.5 pt'."""
    return text.signed_pct(delta) if figure.latency else text.signed_points(delta)


def interval_text(figure: Figure, interval: Interval) -> str:
    """'51 ms … 88 ms', or why there is none."""
    if not interval.usable:
        return interval.note
    return f"{value_text(figure, interval.low)} … {value_text(figure, interval.high)}"
