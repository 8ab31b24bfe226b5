"""Measurement windows: which phase each request's intended send falls in, and which phases are judged.

A phase is *measured* unless the scenario says ``measure: false`` or (by default) it is named warm-up
or cool-down (``scenarios.model.is_warm_or_cool``). Only requests whose first intended send falls in
a measured phase make the tier's figures and SLO verdicts; the rest are counted as excluded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rushhour.audit.fold import NS_PER_S
from rushhour.scenarios.model import is_warm_or_cool


def phase_measured(phase: dict[str, Any]) -> bool:
    """One phase (a run.json dict): its ``measure`` when set, else not a warm-up or cool-down."""
    measure = phase.get("measure")
    if isinstance(measure, bool):
        return measure
    return not is_warm_or_cool(str(phase.get("name", "")))


def measured_flags(phases: list[dict[str, Any]]) -> list[bool]:
    """Per phase: judged or not. When the default would exclude every phase, every phase is judged."""
    flags = [phase_measured(p) for p in phases]
    if flags and not any(flags) and not any(p.get("measure") is False for p in phases):
        return [True] * len(flags)
    return flags


def phase_of(t_ns: np.ndarray | pd.Series, phases: list[dict[str, Any]]) -> np.ndarray:
    """Index of the phase each time (ns from the anchor) falls in; before the first → 0, after the last → last.

    A time that is missing (NaN) gets −1 (no phase: kept with the measured requests, never dropped silently).
    """
    t = np.asarray(t_ns, dtype=np.float64) / NS_PER_S
    if not phases:
        return np.where(np.isfinite(t), 0, -1)
    ends = np.array([float(p.get("end_s", 0.0)) for p in phases[:-1]], dtype=np.float64)
    idx = np.searchsorted(ends, t, side="right")
    return np.where(np.isfinite(t), idx, -1)


def measured_mask(t_ns: np.ndarray | pd.Series, phases: list[dict[str, Any]]) -> np.ndarray:
    """Whether each request (by its first intended send, ns) falls in a measured phase."""
    flags = measured_flags(phases)
    idx = phase_of(t_ns, phases)
    if not flags or all(flags):
        return np.ones(len(idx), dtype=bool)
    table = np.append(np.asarray(flags, dtype=bool), True)  # index −1 (no time) → measured
    return table[idx]


def excluded_spans(phases: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(name, start_s, end_s) of each phase left out of the judgement."""
    return [(str(p.get("name", "")), float(p.get("start_s", 0.0)), float(p.get("end_s", 0.0)))
            for p, measured in zip(phases, measured_flags(phases), strict=True) if not measured]
