"""Run history (``rushhour history``): a per-tier trend across audited runs; the newest run against a trailing window.

The trend is one row per run and tier, taken from each run's ``summary.json`` (the audit's own
figures: not served with its Wilson interval, TTFT percentiles with their bootstrap intervals, the
tier's verdict), stored as Parquet so pandas and DuckDB read it directly.

The newest run is judged against the trailing window — the last ``window`` valid, complete runs of
the same scenario before it — per tier and figure (not served, TTFT p50, TTFT p99, E2E p99) by three
tests that must all say "worse" (``studies/between.py``): the figure is above the window runs' 95 %
prediction interval (run-to-run variance), compare's within-run test of it is significant, and the
change exceeds a practical minimum. The within-run test is ``rushhour compare``'s (``studies/compare.py``
``compare_pair``: moving-block bootstrap of p99 TTFT and E2E, two-proportion test of not served,
Holm-corrected) against the window pooled: latencies concatenated (each run's in send order, oldest
run first), not-served counts summed. With fewer than three runs in the window there is no spread to
judge against: compare's test alone decides, as it did before, and the result names that. An SLO check
that passed in every run of the window and fails now is a regression whatever the tests say.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from rushhour.audit import text
from rushhour.audit.stats import wilson
from rushhour.audit.summary import Summary
from rushhour.studies.between import (
    FIGURES,
    LEVEL,
    MIN_RUNS,
    Figure,
    above,
    change,
    change_text,
    practical,
    prediction_interval,
    value_text,
)
from rushhour.studies.compare import Comparison, RegressionRule, Test, TierSamples, compare_pair, describe_test

HISTORY_SCHEMA = "rushhour.history/2"
TREND_COLUMNS = [
    "run_index", "run_id", "started_at", "scenario", "seed", "stop_reason", "valid", "run_exit_code", "run_passed",
    "tier", "priority", "requests", "served", "unserved", "drop_rate", "drop_low", "drop_high",
    "ttft_p50_ms", "ttft_p50_low", "ttft_p50_high", "ttft_p90_ms", "ttft_p99_ms", "ttft_p99_low", "ttft_p99_high",
    "e2e_p99_ms", "goodput_per_s", "tier_passed", "failed_checks", "run_dir",
]


@dataclass
class HistoryRun:
    """One audited run of the history, in order (oldest first)."""

    run_dir: Path
    summary: Summary
    samples: dict[str, TierSamples] | None = field(default=None)  # loaded only for the regression check


@dataclass(frozen=True)
class FoundRun:
    """A run folder the history found, loaded or not: what tells which run is the newest without its audit."""

    run_dir: Path
    run_id: str | None  # run.json's, when it could be read
    started_at: str | None  # the audited start (None: the run could not be loaded)
    problem: str | None = None  # why it could not be loaded


_STAMP = re.compile(r"(\d{8}T\d{6}Z)")  # rushhour's run ids (and so its run folders' names) start with their UTC time


def id_time(name: str | None) -> str | None:
    """The UTC time a run id or run folder's name starts with (``20261206T050450Z-8de732``), sortable; None if none."""
    match = _STAMP.match(name or "")
    return match.group(1) if match else None


def _start(value: str) -> datetime | None:
    try:
        start = datetime.fromisoformat(value)
    except ValueError:
        return None
    return start if start.tzinfo else start.replace(tzinfo=UTC)


def newest_problems(found: list[FoundRun]) -> list[str]:
    """Why the newest run cannot be judged: it is not the run the history would judge, or it did not load.

    The newest is taken twice without trusting its audit: by its folder's time (the UTC time its name
    starts with) and by its run id's (run.json). Either newest must have loaded and must start no earlier
    than any other run; else the history would silently judge the run before it (a broken or back-dated
    newest run), so it says so and cannot pass.
    """
    problems: list[str] = []
    starts = {f.run_dir: _start(f.started_at) for f in found if f.started_at}
    for view, key in (("folder time", lambda f: id_time(f.run_dir.name)), ("run id", lambda f: id_time(f.run_id))):
        stamps: dict[Path, str] = {f.run_dir: stamp for f in found if (stamp := key(f))}
        if not stamps:
            continue
        last = max(stamps.values())
        for newest in (f for f in found if stamps.get(f.run_dir) == last):
            start = starts.get(newest.run_dir)
            if newest.problem or newest.started_at is None:
                problems.append(f"the newest run by {view} ({last}), {newest.run_dir}, cannot be loaded: "
                                f"{newest.problem or 'no summary'}")
                continue
            later = [f for f in found if f.run_dir in starts and stamps.get(f.run_dir) != last
                     and (start is None or (starts[f.run_dir] or start) > start)]
            if start is None or later:
                first = max(later, key=lambda f: starts[f.run_dir] or datetime.min.replace(tzinfo=UTC), default=None)
                other = f"; {first.run_dir} started at {first.started_at}" if first else ""
                problems.append(f"the newest run by {view} ({last}), {newest.run_dir}, is out of order: it started "
                                f"at {newest.started_at}{other}")
    return list(dict.fromkeys(problems))


def order_runs(runs: list[HistoryRun]) -> list[HistoryRun]:
    """Oldest first: by the run's start (ISO 8601, UTC), then its id (a UTC timestamp too)."""
    return sorted(runs, key=lambda r: (r.summary.run.started_at, r.summary.run.run_id))


def _tier_passed(summary: Summary, tier: str) -> tuple[bool, list[str]]:
    mine = [v for v in summary.verdicts if v.tier in (tier, "run")]
    # an inconclusive check is no pass (fail closed) but no miss either: named as such, not as a failure
    failed = [f"{v.check} (inconclusive)" if v.inconclusive else v.check for v in mine
              if not v.passed and not v.vacuous]  # vacuous: judged nothing, so neither passed nor missed
    return summary.validity.valid and not failed, failed


def _ci(ci: dict[str, tuple[float, float]], key: str, end: int) -> float | None:
    pair = ci.get(key)
    return float(pair[end]) if pair else None


def trend_rows(runs: list[HistoryRun]) -> list[dict[str, Any]]:
    """One row per run and tier (runs in the order given), the columns of ``TREND_COLUMNS``."""
    rows = []
    for index, run in enumerate(runs, start=1):
        s = run.summary
        for t in s.tiers:
            passed, failed = _tier_passed(s, t.name)
            ttft = t.latency.ttft_ms
            rows.append({
                "run_index": index, "run_id": s.run.run_id, "started_at": s.run.started_at, "scenario": s.run.scenario,
                "seed": s.run.seed, "stop_reason": s.run.stop_reason, "valid": s.validity.valid,
                "run_exit_code": s.exit_code, "run_passed": s.passed, "tier": t.name, "priority": t.priority,
                "requests": t.requests, "served": t.by_class.get("served", 0), "unserved": t.unserved,
                "drop_rate": t.drop_rate.value, "drop_low": t.drop_rate.low, "drop_high": t.drop_rate.high,
                "ttft_p50_ms": ttft.p50, "ttft_p50_low": _ci(ttft.ci, "p50", 0),
                "ttft_p50_high": _ci(ttft.ci, "p50", 1),
                "ttft_p90_ms": ttft.p90, "ttft_p99_ms": ttft.p99, "ttft_p99_low": _ci(ttft.ci, "p99", 0),
                "ttft_p99_high": _ci(ttft.ci, "p99", 1), "e2e_p99_ms": t.latency.e2e_ms.p99,
                "goodput_per_s": t.goodput_per_s, "tier_passed": passed, "failed_checks": ", ".join(failed),
                "run_dir": str(run.run_dir),
            })
    return rows


def trend_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a typed DataFrame (nullable floats stay float64 with NaN; Parquet-ready)."""
    frame = pd.DataFrame(rows, columns=TREND_COLUMNS)
    for name in ("drop_rate", "drop_low", "drop_high", "ttft_p50_ms", "ttft_p50_low", "ttft_p50_high",
                 "ttft_p90_ms", "ttft_p99_ms", "ttft_p99_low", "ttft_p99_high", "e2e_p99_ms", "goodput_per_s"):
        frame[name] = frame[name].astype("float64")
    for name in ("run_index", "seed", "run_exit_code", "priority", "requests", "served", "unserved"):
        frame[name] = frame[name].astype("int64")
    for name in ("valid", "run_passed", "tier_passed"):
        frame[name] = frame[name].astype("bool")
    return frame


def trailing_window(runs: list[HistoryRun], k: int) -> tuple[HistoryRun, list[HistoryRun], list[str]]:
    """(the newest run, the last ``k`` valid, complete runs of its scenario before it, notes on what was left out).

    Invalid runs, runs cut short (interrupted, aborted, a budget stop) and runs of the other mode (simulated vs
    real time) are no baseline: left out, named.
    """
    newest = runs[-1]
    scenario = newest.summary.run.scenario
    notes = []
    earlier = [r for r in runs[:-1] if r.summary.run.scenario == scenario]
    other = len(runs) - 1 - len(earlier)
    if other:
        notes.append(f"{other} run(s) of other scenarios are in the trend but not in the window")
    # a simulated run (virtual time, the testbed's model, often another --replicas/--scale) is no baseline for a
    # real one, nor the other way round: same scenario name, another experiment
    other_mode = [r for r in earlier if r.summary.run.mode != newest.summary.run.mode]
    if other_mode:
        notes.append(f"{len(other_mode)} {other_mode[0].summary.run.mode} run(s) of the scenario left out of the "
                     f"window (the newest run is {newest.summary.run.mode}): "
                     + ", ".join(r.summary.run.run_id for r in other_mode))
        earlier = [r for r in earlier if r.summary.run.mode == newest.summary.run.mode]
    invalid = [r for r in earlier if not r.summary.validity.valid]
    if invalid:
        notes.append(f"{len(invalid)} invalid run(s) left out of the window: "
                     + ", ".join(r.summary.run.run_id for r in invalid))
    cut = [r for r in earlier if r.summary.validity.valid and r.summary.run.interrupted]
    if cut:
        notes.append(f"{len(cut)} run(s) that did not end on schedule left out of the window: "
                     + ", ".join(f"{r.summary.run.run_id} ({r.summary.run.stop_reason})" for r in cut))
    window = [r for r in earlier if r.summary.validity.valid and not r.summary.run.interrupted][-k:]
    return newest, window, notes


def pooled_baseline(window: list[HistoryRun]) -> tuple[Summary, dict[str, TierSamples]]:
    """The window as one baseline: latencies concatenated, not-served counts summed, checks passed in every run."""
    latest = window[-1].summary
    tiers = []
    for tier in latest.tiers:
        own = [next((t for t in r.summary.tiers if t.name == tier.name), None) for r in window]
        k = sum(t.drop_rate.k for t in own if t is not None)
        n = sum(t.drop_rate.n for t in own if t is not None)
        served = sum(t.by_class.get("served", 0) for t in own if t is not None)
        requests = sum(t.requests for t in own if t is not None)
        tiers.append(tier.model_copy(update={"drop_rate": wilson(k, n), "requests": requests,
                                             "by_class": {**tier.by_class, "served": served}}))
    passed_everywhere = []
    for verdict in latest.verdicts:
        if all(any(v.tier == verdict.tier and v.check == verdict.check and v.passed for v in r.summary.verdicts)
               for r in window):
            passed_everywhere.append(verdict)
    base = latest.model_copy(update={"tiers": tiers, "verdicts": passed_everywhere})
    samples: dict[str, TierSamples] = {}
    for run in window:
        for name, part in (run.samples or {}).items():
            have = samples.get(name)
            samples[name] = part if have is None else TierSamples(np.concatenate([have.ttft_ms, part.ttft_ms]),
                                                                  np.concatenate([have.e2e_ms, part.e2e_ms]))
    return base, samples


Mode = Literal["between-run", "within-run"]


class FigureJudgement(BaseModel):
    """One figure of one tier: the window's runs, their prediction interval, the newest run, and the verdict."""

    model_config = ConfigDict(extra="forbid")
    tier: str
    figure: str = Field(description="the trend table's column: drop_rate, ttft_p50_ms, ttft_p99_ms, e2e_p99_ms")
    label: str
    window_values: list[float | None] = Field(description="each window run's figure, in the order of `window`")
    newest: float | None
    n: int = Field(description="window runs with a value")
    center: float | None = Field(description="the window's mean (not served) or geometric mean (latencies)")
    low: float | None = Field(description="the 95 % prediction interval of one further run (None: too few runs)")
    high: float | None
    scale: str = Field(description="log (latencies) or linear: where the interval was computed")
    interval_note: str = ""
    change: float | None = Field(description="newest against the centre: ratio − 1 (latencies), points (not served)")
    min_change: float = Field(description="the practical minimum of `change`")
    min_change_ms: float = Field(default=0.0, description="latencies: the practical minimum of the rise in ms too")
    between: bool | None = Field(description="above the interval's upper end (None: no interval or no value)")
    within: bool | None = Field(description="the within-run test is significant (None: not testable)")
    within_p: float | None = None
    within_test: str = ""
    practical: bool = Field(description="worse than the window by more than the minimum")
    mode: Mode = Field(description="between-run: all three tests must flag it; within-run: compare's test alone "
                       "(fewer than 3 window runs with a value)")
    regression: bool
    flagged_by: list[str] = Field(default_factory=list, description="which of between-run, within-run, practical "
                                  "said worse")
    why: str


class HistoryResult(BaseModel):
    """``history.json``: what the history found, and the exit code of ``--fail-on-regression``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_: str = Field(default=HISTORY_SCHEMA, alias="schema")
    runs: int
    scenarios: list[str]
    skipped: list[str] = Field(default_factory=list, description="folders that could not be read or audited, why")
    newest: str | None = None
    window: list[str] = Field(default_factory=list, description="run ids of the trailing window (oldest first)")
    window_asked: int = 0
    method: Mode | None = Field(default=None, description="between-run when the window holds ≥ 3 runs, else "
                                "within-run (compare's test alone, named in the notes)")
    rule: dict[str, float] = Field(default_factory=dict, description="level, alpha, min_change, min_latency_ms, "
                                   "min_drop_change, min_runs")
    judgements: list[FigureJudgement] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    comparison: Comparison | None = None
    regressions: list[str] = Field(default_factory=list)
    exit_code: int = Field(description="0 no regression, 1 regression, 2 nothing to judge (no window, an invalid "
                           "or cut-short newest run)")


@dataclass
class Verdict:
    """What ``judge_newest`` found."""

    window: list[str]
    notes: list[str]
    comparison: Comparison | None
    exit_code: int
    regressions: list[str]
    method: Mode | None = None
    judgements: list[FigureJudgement] = field(default_factory=list)


def tier_figure(summary: Summary, tier: str, key: str) -> float | None:
    """One tier's figure in a run's summary (None: the tier or the value is missing)."""
    t = next((t for t in summary.tiers if t.name == tier), None)
    if t is None:
        return None
    value = {"drop_rate": lambda: t.drop_rate.value, "ttft_p50_ms": lambda: t.latency.ttft_ms.p50,
             "ttft_p99_ms": lambda: t.latency.ttft_ms.p99, "e2e_p99_ms": lambda: t.latency.e2e_ms.p99}[key]()
    return None if value is None or not math.isfinite(value) else float(value)


def _within(comparison: Comparison, tier: str, fig: Figure, rule: RegressionRule) -> tuple[bool | None, float | None,
                                                                                          str, Test | None]:
    """(significant, p, the test's name, compare's gated test) of the within-run test of one figure."""
    if fig.compare_metric is not None:
        test = next((t for t in comparison.tests if t.tier == tier and t.metric == fig.compare_metric), None)
        if test is None:
            return None, None, "", None
        name = f"{test.test}, Holm-adjusted"
        return (test.significant if test.judged else None), (test.p_adjusted if test.judged else None), name, test
    shift = next((s for s in comparison.shifts if s.tier == tier and s.metric == "ttft"), None)
    if shift is None or min(shift.n_base, shift.n_cand) < rule.min_samples:
        return None, None, "", None
    return shift.p_greater < rule.alpha, shift.p_greater, "Mann-Whitney U, one-sided (compare's TTFT shift)", None


def _why(j: FigureJudgement, fig: Figure, test: Test | None) -> str:
    """One sentence: the figure's verdict and the reason."""
    head = f"{j.tier}: {j.label} {value_text(fig, j.newest)}"
    if j.mode == "within-run":
        if test is not None and j.regression:  # today's sentence, as compare writes it
            return describe_test(test)
        gated = "" if fig.compare_metric else "; TTFT p50 is not gated by compare"
        return f"{head}: judged by the within-run test alone ({j.interval_note}){gated}"
    p = "" if j.within_p is None else f" ({text.p_clause(j.within_p)})"
    spread = (f"the window's 95 % prediction interval {value_text(fig, j.low)} … {value_text(fig, j.high)} "
              f"({j.n} runs, centre {value_text(fig, j.center)})")
    floor, rise = "", ""
    if fig.latency and j.min_change_ms:
        floor = f" and +{text.plain(j.min_change_ms)} ms"
        if j.newest is not None and j.center is not None:
            diff = j.newest - j.center
            rise = f" ({'+' if diff >= 0 else '−'}{text.ms(abs(diff))})"
    delta = f"{change_text(fig, j.change)}{rise} against the window (minimum {change_text(fig, j.min_change)}{floor})"
    if j.newest is None:
        return f"{head}: no value in the newest run, not judged"
    if j.regression:
        return f"{head} is above {spread}, {delta}, and the within-run test agrees{p}"
    if not j.between:
        return f"{head} is within {spread}: run-to-run noise"
    if not j.within:
        verdict = "does not call it significant" if j.within is False else "cannot judge it (too few samples)"
        return f"{head} is above {spread}, but the within-run test {verdict}{p}"
    return f"{head} is above {spread} and significant{p}, but only {delta}"


def judge_figure(tier: str, fig: Figure, window: list[Summary], newest: Summary, comparison: Comparison,
                 rule: RegressionRule, level: float = LEVEL) -> FigureJudgement:
    """The between-run, within-run and practical tests of one figure, and the verdict they add up to."""
    values = [tier_figure(s, tier, fig.key) for s in window]
    value = tier_figure(newest, tier, fig.key)
    interval = prediction_interval(values, log=fig.latency, level=level,
                                   **({} if fig.latency else {"lower": 0.0, "upper": 1.0}))
    delta = change(value, interval.center, relative=fig.latency)
    minimum = rule.latency_rel if fig.latency else rule.drop_abs
    is_practical = practical(delta, minimum)
    if fig.latency and rule.latency_abs_ms and value is not None and interval.center is not None:
        is_practical = is_practical and value - interval.center > rule.latency_abs_ms
    within, p, test_name, test = _within(comparison, tier, fig, rule)
    between = above(value, interval)
    mode: Mode = "between-run" if interval.usable else "within-run"
    if mode == "between-run":
        regression = bool(between and within and is_practical)
    else:  # today's rule: compare's gated test (significant and practically worse on the pooled window)
        regression = bool(test is not None and test.regression)
    flagged = [name for name, flag in (("between-run", between), ("within-run", within),
                                       ("practical", is_practical)) if flag]
    j = FigureJudgement(
        tier=tier, figure=fig.key, label=fig.label, window_values=values, newest=value, n=interval.n,
        center=interval.center, low=interval.low, high=interval.high, scale=interval.scale,
        interval_note=interval.note, change=None if delta is None or not math.isfinite(delta) else delta,
        min_change=minimum, min_change_ms=rule.latency_abs_ms if fig.latency else 0.0,
        between=between, within=within, within_p=p, within_test=test_name,
        practical=is_practical, mode=mode, regression=regression, flagged_by=flagged, why="",
    )
    j.why = _why(j, fig, test)
    return j


def judge_newest(runs: list[HistoryRun], k: int, rule: RegressionRule | None = None, seed: int = 0,
                 level: float = LEVEL, n_boot: int = 2000) -> Verdict:
    """The newest run against its trailing window: between-run, within-run and practical tests per tier and figure.

    Every run in ``runs`` that the window or the newest uses must have its ``samples`` loaded.
    """
    rule = rule or RegressionRule()
    newest, window, notes = trailing_window(runs, k)
    if not window:
        notes.append("no earlier valid run of this scenario: nothing to compare the newest run with")
        return Verdict([], notes, None, 2, [])
    if len(window) < k:
        notes.append(f"the window holds {len(window)} run(s), fewer than the {k} asked")
    method: Mode = "between-run" if len(window) >= MIN_RUNS else "within-run"
    if method == "within-run":
        notes.append(f"the window holds {len(window)} run(s), fewer than {MIN_RUNS}: no run-to-run spread to "
                     "judge against; judged by compare's within-run test alone (the window pooled)")
    base, base_samples = pooled_baseline(window)
    comparison = compare_pair(base, base_samples, newest.summary, newest.samples or {}, rule, seed=seed,
                              n_boot=n_boot, base_dir=f"window of {len(window)} run(s)", cand_dir=newest.run_dir)
    tiers = [t.name for t in window[-1].summary.tiers if any(t.name == n.name for n in newest.summary.tiers)]
    judgements = [judge_figure(tier, fig, [r.summary for r in window], newest.summary, comparison, rule, level)
                  for tier in tiers for fig in FIGURES]
    regressions = [j.why for j in judgements if j.regression]
    regressions += [f for f in comparison.slo_flips if " failed" in f]  # the gate's answer changed: never noise
    cut = newest.summary.run.interrupted
    if cut:
        notes.append(f"the newest run did not end on schedule ({newest.summary.run.stop_reason}): it cannot pass")
    code = 2 if comparison.verdict == "invalid" or cut else (1 if regressions else 0)
    return Verdict([r.summary.run.run_id for r in window], notes, comparison, code, regressions, method, judgements)
