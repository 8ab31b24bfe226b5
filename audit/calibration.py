"""The unloaded TTFT baseline that inflation is measured against, by prompt size."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from rushhour.audit.fold import CALIBRATION_PERSONA, eq

EARLY_SHARE = 0.10  # fallback baseline: the first 10 % of the run …
FAST_QUANTILE = 0.10  # … and its fastest decile, per prompt-size bin
MIN_BIN = 3  # fewer early samples than this in a bin: borrow the nearest populated bin


@dataclass
class Baseline:
    """Idle TTFT (ns) per log2 prompt-size bin, and where it came from."""

    bins: np.ndarray  # bin index (floor(log2(prompt size)))
    idle_ns: np.ndarray
    source: str

    def idle_for(self, prompt_size: np.ndarray) -> np.ndarray:
        """Idle TTFT for each prompt size (nearest calibrated bin; NaN when there is no baseline)."""
        size = np.asarray(prompt_size, dtype=np.float64)
        if len(self.bins) == 0:
            return np.full(len(size), np.nan)
        # every bin a float64 can fall in, looked up: the nearest-bin rule once per bin, not per attempt
        return self._nearest_idle(_BIN_RANGE)[_bin(size) - _BIN_RANGE[0]]

    def _nearest_idle(self, b: np.ndarray) -> np.ndarray:
        """The idle TTFT of the calibrated bin nearest each bin of ``b`` (a tie: the larger one)."""
        # nearest calibrated bin: prompt-size effects are smooth, so a neighbour is a fair stand-in
        pos = np.clip(np.searchsorted(self.bins, b), 0, len(self.bins) - 1)
        left = np.clip(pos - 1, 0, len(self.bins) - 1)
        use_left = np.abs(self.bins[left] - b) < np.abs(self.bins[pos] - b)
        return np.where(use_left, self.idle_ns[left], self.idle_ns[pos])


# floor(log2(x)) of any positive finite float64: from the smallest subnormal (-1074) to the largest (1023)
_BIN_RANGE = np.arange(-1074, 1024, dtype=np.int64)


def _bin(size: np.ndarray) -> np.ndarray:
    clean = np.where(np.isfinite(size) & (size > 0), size, 1.0)
    return np.floor(np.log2(clean)).astype(np.int64)


def _per_bin(sizes: np.ndarray, ttft: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    frame = pd.DataFrame({"bin": _bin(sizes), "ttft": ttft})
    grouped = frame.groupby("bin")["ttft"]
    if how == "median":
        stat = grouped.median()
    else:
        stat = grouped.quantile(FAST_QUANTILE)
        stat = stat[grouped.size() >= MIN_BIN] if (grouped.size() >= MIN_BIN).any() else stat
    return stat.index.to_numpy(dtype=np.int64), stat.to_numpy(dtype=np.float64)


def baseline(attempts: pd.DataFrame) -> Baseline:
    """From the run's idle probes (persona ``calibration``) if any served, else the early fastest decile."""
    ok = attempts["served"].to_numpy() & attempts["ttft_ns"].notna().to_numpy()
    probes = ok & eq(attempts["persona"], CALIBRATION_PERSONA)
    if probes.any():
        bins, idle = _per_bin(attempts["prompt_size"].to_numpy()[probes],
                              attempts["ttft_ns"].to_numpy()[probes], "median")
        return Baseline(bins, idle, "calibration")
    if not ok.any():
        return Baseline(np.array([], dtype=np.int64), np.array([]), "none")
    sent = attempts["sent_ns"].to_numpy()
    start, end = np.nanmin(sent[ok]), np.nanmax(sent[ok])
    early = ok & (sent <= start + EARLY_SHARE * max(end - start, 0.0))
    bins, idle = _per_bin(attempts["prompt_size"].to_numpy()[early], attempts["ttft_ns"].to_numpy()[early], "q")
    return Baseline(bins, idle, "early-fastest-decile")


def inflation_ratio(attempts: pd.DataFrame, base: Baseline) -> np.ndarray:
    """TTFT / idle TTFT of the same prompt size, per attempt (NaN without a TTFT or a baseline)."""
    idle = base.idle_for(attempts["prompt_size"].to_numpy())
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = attempts["ttft_ns"].to_numpy(dtype=np.float64) / idle
    ratio[~np.isfinite(ratio)] = np.nan
    return ratio
