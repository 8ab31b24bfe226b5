"""Run comparison: per-tier significance tests on raw latency samples and drop rates, and the regression rule.

The statistics are pure numpy functions (``mann_whitney_u``, ``two_proportion_z``,
``bootstrap_quantile_diff``, ``holm``); ``compare_runs`` reads two run folders (their audited
attempts tables and their ``summary.json``) and applies the regression rule: a candidate regresses when it is
significantly worse (after a Holm correction over every gated test) AND worse by more than a
practical threshold, so two identical runs with different seeds do not raise a false alarm.

Latencies inside one run are autocorrelated (a queue that is long now is long a second later), so the
p99 bootstrap resamples blocks of consecutive requests (moving-block bootstrap) rather than single
requests; an i.i.d. bootstrap would understate the variance and flag noise as a regression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from rushhour.audit import text
from rushhour.audit.phases import measured_mask
from rushhour.audit.stats import wilson
from rushhour.audit.summary import Summary

COMPARE_SCHEMA = "rushhour.compare/1"
Alternative = Literal["two-sided", "greater", "less"]
_Z95 = 1.959963984540054


# --------------------------------------------------------------------------- pure statistics


def norm_sf(z: float) -> float:
    """Upper tail of the standard normal, P(Z > z)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _p_from_z(z: float, alternative: Alternative) -> float:
    """P-value of a z statistic for the given alternative."""
    if alternative == "greater":
        return norm_sf(z)
    if alternative == "less":
        return norm_sf(-z)
    return min(1.0, 2.0 * norm_sf(abs(z)))


@dataclass(frozen=True)
class MannWhitney:
    """Mann-Whitney U of ``y`` against ``x`` (normal approximation, tie and continuity corrected)."""

    u: float  # U of y: pairs (x_i, y_j) with y_j > x_i, ties counted one half
    z: float
    p: float
    prob_superiority: float  # P(Y > X) + P(Y = X)/2; 0.5 = no shift
    ps_low: float
    ps_high: float
    n_x: int
    n_y: int


def mann_whitney_u(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
                   alternative: Alternative = "two-sided", continuity: bool = True) -> MannWhitney:
    """Mann-Whitney U test; ``alternative='greater'`` asks whether ``y`` tends to be larger than ``x``."""
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return MannWhitney(float("nan"), 0.0, 1.0, 0.5, 0.0, 1.0, n1, n2)
    both = np.concatenate([a, b])
    ranks = _average_ranks(both)
    r2 = float(ranks[n1:].sum())
    u = r2 - n2 * (n2 + 1) / 2.0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    _, counts = np.unique(both, return_counts=True)
    tie_term = float(((counts.astype(float) ** 3) - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        z = 0.0
    else:
        diff = u - mu
        if continuity:
            if alternative == "greater":
                diff -= 0.5
            elif alternative == "less":
                diff += 0.5
            else:
                diff = math.copysign(max(abs(diff) - 0.5, 0.0), diff)
        z = diff / math.sqrt(var)
    ps = u / (n1 * n2)
    low, high = _auc_interval(ps, n1, n2)
    return MannWhitney(u, z, _p_from_z(z, alternative), ps, low, high, n1, n2)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    ranks = np.empty(len(values), dtype=float)
    # boundaries of runs of equal values
    change = np.concatenate([[True], sorted_vals[1:] != sorted_vals[:-1], [True]])
    starts = np.flatnonzero(change[:-1])
    ends = np.flatnonzero(change[1:]) + 1
    avg = (starts + ends + 1) / 2.0  # ranks are 1-based: mean of start+1 .. end
    run_ids = np.cumsum(change[:-1]) - 1
    ranks[order] = avg[run_ids]
    return ranks


def _auc_interval(a: float, n1: int, n2: int) -> tuple[float, float]:
    """95 % interval of a probability of superiority (Hanley & McNeil 1982 standard error)."""
    q1 = a / (2 - a) if a < 2 else 0.0
    q2 = 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n2 - 1) * (q1 - a * a) + (n1 - 1) * (q2 - a * a)) / (n1 * n2)
    se = math.sqrt(max(var, 0.0))
    return max(0.0, a - _Z95 * se), min(1.0, a + _Z95 * se)


@dataclass(frozen=True)
class TwoProportion:
    """Two-proportion z-test of p2 against p1 (pooled SE) with a Newcombe interval of p2 - p1."""

    p1: float
    p2: float
    diff: float  # p2 - p1
    low: float
    high: float
    z: float
    p: float


def two_proportion_z(k1: int, n1: int, k2: int, n2: int, alternative: Alternative = "two-sided") -> TwoProportion:
    """Pooled two-proportion z-test; ``alternative='greater'`` asks whether p2 > p1."""
    if n1 == 0 or n2 == 0:
        return TwoProportion(float("nan"), float("nan"), float("nan"), -1.0, 1.0, 0.0, 1.0)
    p1, p2 = k1 / n1, k2 / n2
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    z = 0.0 if se == 0 else (p2 - p1) / se
    r1, r2 = wilson(k1, n1), wilson(k2, n2)  # n1, n2 > 0: both intervals exist
    l1, u1 = float(r1.low or 0.0), float(r1.high or 0.0)
    l2, u2 = float(r2.low or 0.0), float(r2.high or 0.0)
    d = p2 - p1
    low = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return TwoProportion(p1, p2, d, low, high, z, _p_from_z(z, alternative))


@dataclass(frozen=True)
class QuantileDiff:
    """Bootstrap of the difference of one quantile, candidate minus baseline."""

    q: float
    base: float
    cand: float
    diff: float
    low: float  # 95 % percentile interval of the difference
    high: float
    rel: float  # cand / base - 1
    rel_low: float
    rel_high: float
    p_greater: float  # one-sided bootstrap p-value that cand's quantile exceeds base's
    block: int
    n_boot: int


def block_length(n: int) -> int:
    """Default moving-block length: about sqrt(n), at least 1."""
    return max(1, round(math.sqrt(n)))


def _block_resample_quantiles(rng: np.random.Generator, data: np.ndarray, q: float, n_boot: int,
                              block: int) -> np.ndarray:
    """Quantile ``q`` of ``n_boot`` moving-block bootstrap resamples of ``data`` (kept in order)."""
    n = len(data)
    block = max(1, min(block, n))
    n_blocks = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(n_boot, n_blocks))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(n_boot, -1)[:, :n]
    return np.quantile(data[idx], q, axis=1)


def bootstrap_quantile_diff(base: Sequence[float] | np.ndarray, cand: Sequence[float] | np.ndarray,
                            q: float = 0.99, n_boot: int = 2000, seed: int = 0,
                            block: int | None = None) -> QuantileDiff:
    """Moving-block bootstrap of quantile(cand) - quantile(base); samples must be in send order."""
    a = np.asarray(base, dtype=float)
    b = np.asarray(cand, dtype=float)
    if len(a) == 0 or len(b) == 0:
        nan = float("nan")
        return QuantileDiff(q, nan, nan, nan, nan, nan, nan, nan, nan, 1.0, 0, 0)
    rng = np.random.default_rng(seed)
    blk = block if block is not None else max(block_length(len(a)), block_length(len(b)))
    qa = _block_resample_quantiles(rng, a, q, n_boot, blk)
    qb = _block_resample_quantiles(rng, b, q, n_boot, blk)
    diffs = qb - qa
    base_q = float(np.quantile(a, q))
    cand_q = float(np.quantile(b, q))
    low, high = (float(v) for v in np.quantile(diffs, [0.025, 0.975]))
    rel = cand_q / base_q - 1 if base_q > 0 else float("nan")
    ratios = qb / np.where(qa > 0, qa, np.nan) - 1
    rel_low, rel_high = (float(v) for v in np.nanquantile(ratios, [0.025, 0.975])) if base_q > 0 else (rel, rel)
    p_greater = float((np.count_nonzero(diffs <= 0) + 1) / (n_boot + 1))
    return QuantileDiff(q, base_q, cand_q, cand_q - base_q, low, high, rel, rel_low, rel_high, p_greater, blk,
                        n_boot)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


MIN_LATENCY_MS = 25.0  # the default practical floor of a latency rise, ms (`--min-latency-ms`)


@dataclass(frozen=True)
class RegressionRule:
    """When a candidate counts as a regression: significant after correction AND practically worse."""

    alpha: float = 0.05
    latency_rel: float = 0.10  # p99 at least 10 % higher
    # and at least this many ms higher: below it a p99 shift is a busy host's scheduler jitter, not the stack (two
    # identical testbed runs on the 2-core CI machine: interactive TTFT p99 11 ms, then 22 ms, p = 0.03)
    latency_abs_ms: float = MIN_LATENCY_MS
    drop_abs: float = 0.01  # drop rate at least 1 point higher
    min_samples: int = 30  # fewer served requests than this on a side: latency is not judged
    correction: Literal["holm", "none"] = "holm"
    allow_invalid: bool = False  # judge runs the audit marked invalid (a warning instead of exit 2)


def is_regression(p_adjusted: float, worse_by: float, threshold: float, alpha: float) -> bool:
    """The rule itself: significantly worse and worse by more than the practical threshold."""
    return p_adjusted < alpha and worse_by > threshold


# --------------------------------------------------------------------------- result model


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Test(_Model):
    """One gated comparison of one metric of one tier."""

    tier: str
    metric: str  # ttft_p99 | e2e_p99 | drop_rate
    base: float | None
    cand: float | None
    diff: float | None  # cand - base (ms, or proportion points)
    low: float | None  # 95 % interval of diff
    high: float | None
    rel: float | None = None  # relative change of a latency quantile
    rel_low: float | None = None
    rel_high: float | None = None
    test: str  # what produced p
    p: float  # one-sided: candidate worse
    p_adjusted: float = 1.0
    threshold: str = ""
    practical: bool = False  # worse by more than the practical threshold
    significant: bool = False
    regression: bool = False
    judged: bool = True  # False: too few samples, reported only
    note: str = ""


class Shift(_Model):
    """Mann-Whitney of a whole latency distribution (reported, not gated)."""

    tier: str
    metric: str  # ttft | e2e
    n_base: int
    n_cand: int
    median_base: float | None
    median_cand: float | None
    u: float | None
    z: float
    p_two_sided: float
    p_greater: float
    prob_superiority: float  # P(candidate > baseline)
    ps_low: float
    ps_high: float


class Side(_Model):
    """One run, as the comparison saw it."""

    run_dir: str
    run_id: str
    scenario: str
    target: str
    profile: str
    seed: int
    valid: bool
    reasons: list[str] = Field(default_factory=list)
    passed: bool
    duration_s: float


class TierRow(_Model):
    """Headline figures of one tier on both sides."""

    tier: str
    priority: int
    requests: tuple[int, int]
    served: tuple[int, int]
    drop_rate: tuple[float | None, float | None]
    ttft_p50_ms: tuple[float | None, float | None]
    ttft_p99_ms: tuple[float | None, float | None]
    e2e_p99_ms: tuple[float | None, float | None]
    goodput_per_s: tuple[float, float]


class Comparison(_Model):
    """Baseline against one candidate."""

    baseline: Side
    candidate: Side
    tiers: list[TierRow]
    tests: list[Test]
    shifts: list[Shift]
    regressions: list[str]
    warnings: list[str]
    verdict: Literal["ok", "regression", "invalid"]
    slo_flips: list[str] = Field(default_factory=list, description="SLO checks that passed in the baseline and "
                                 "fail (or cannot be judged) in the candidate, significant or not")
    changes: list[str] = Field(default_factory=list, description="what differs between the runs besides the "
                               "code under test: scenario, target, profile")


class CompareResult(_Model):
    """``compare.json``: one baseline against one or more candidates."""

    schema_: str = Field(default=COMPARE_SCHEMA, alias="schema")
    alpha: float
    rule: dict[str, Any]
    comparisons: list[Comparison]
    exit_code: int  # 0 ok, 1 regression, 2 invalid input
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --------------------------------------------------------------------------- reading runs


@dataclass
class TierSamples:
    """Served attempts of one tier in send order: TTFT and E2E in milliseconds."""

    ttft_ms: np.ndarray
    e2e_ms: np.ndarray


def served_samples(table: pd.DataFrame, phases: list[dict[str, Any]] | None = None) -> dict[str, TierSamples]:
    """TTFT and E2E (ms) of the served attempts of the audit's attempts table, per tier, in send order.

    "Served" is the audit's class, and calibration probes are left out, as in every tier figure. With
    the run's ``phases``, only requests whose first intended send falls in a measured phase count (the
    measurement window, ``audit.phases``), like the summary's figures.
    """
    keep = table["class"].eq("served").to_numpy() & ~table["probe"].to_numpy()
    if phases and {"logical_id", "intended_ns"} <= set(table.columns):
        first = table.groupby("logical_id", observed=True, sort=False)["intended_ns"].transform("min")
        keep &= measured_mask(first.astype("float64").to_numpy(), phases)
    rows = table[keep]
    rows = rows.sort_values("sent_ns", kind="stable")
    out: dict[str, TierSamples] = {}
    for tier, part in rows.groupby("tier", observed=True, sort=False):
        ttft = part["ttft_ns"].to_numpy(dtype=np.float64) / 1e6
        e2e = part["e2e_ns"].to_numpy(dtype=np.float64) / 1e6
        out[str(tier)] = TierSamples(ttft[np.isfinite(ttft)], e2e[np.isfinite(e2e)])
    return out


def load_run(run_dir: Path) -> tuple[Summary, dict[str, TierSamples]]:
    """A run's summary (audited now if missing or stale) and its served latency samples (from the audit's table)."""
    from rushhour.audit import attempts, load_or_audit  # the audit package entry point

    summary = load_or_audit(Path(run_dir))
    return summary, served_samples(attempts(Path(run_dir), columns=_SAMPLE_COLUMNS), summary.run.phases)


_SAMPLE_COLUMNS = ["tier", "class", "probe", "sent_ns", "ttft_ns", "e2e_ns", "logical_id", "intended_ns"]


# --------------------------------------------------------------------------- comparing


def _side(run_dir: Path, s: Summary) -> Side:
    return Side(
        run_dir=str(run_dir), run_id=s.run.run_id, scenario=s.run.scenario, target=s.run.target,
        profile=s.run.profile, seed=s.run.seed, valid=s.validity.valid, reasons=list(s.validity.reasons),
        passed=s.passed, duration_s=s.run.duration_s,
    )


def _q(values: np.ndarray, q: float) -> float | None:
    return float(np.quantile(values, q)) if len(values) else None


def _fin(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _target_pair(base: Summary, cand: Summary) -> tuple[str, str, str]:
    """What to compare as the runs' target: two embedded testbeds by what they were (their ports are
    ephemeral), anything else by its URL."""
    if base.run.testbed and cand.run.testbed:
        return "testbed", base.run.testbed, cand.run.testbed
    def where(run: Summary) -> str:
        return f"testbed {run.run.testbed}" if run.run.testbed else run.run.target

    return "target", where(base), where(cand)


def compare_pair(base: Summary, base_samples: dict[str, TierSamples], cand: Summary,
                 cand_samples: dict[str, TierSamples], rule: RegressionRule | None = None, seed: int = 0,
                 n_boot: int = 2000, base_dir: Path | str = "", cand_dir: Path | str = "") -> Comparison:
    """Compare a candidate run with a baseline, tier by tier (tiers matched by name)."""
    rule = rule or RegressionRule()
    warnings: list[str] = []
    base_side, cand_side = _side(Path(base_dir), base), _side(Path(cand_dir), cand)
    changes = [f"{what} changed: {a!r} → {b!r}" for what, a, b in (
        ("scenario", base.run.scenario, cand.run.scenario), _target_pair(base, cand),
        ("profile", base.run.profile, cand.run.profile)) if a != b]
    warnings += [f"{c}: the runs may not be comparable" for c in changes]
    for label, side in (("baseline", base_side), ("candidate", cand_side)):
        if not side.valid:
            warnings.append(f"{label} run is invalid: {'; '.join(side.reasons) or 'see its summary'}")
    cand_tiers = {t.name: t for t in cand.tiers}
    missing = [t.name for t in base.tiers if t.name not in cand_tiers]
    if missing:
        warnings.append(f"tiers missing from the candidate: {', '.join(missing)}")
    rows: list[TierRow] = []
    tests: list[Test] = []
    shifts: list[Shift] = []
    empty = TierSamples(np.empty(0), np.empty(0))
    for t_index, bt in enumerate(base.tiers):
        ct = cand_tiers.get(bt.name)
        if ct is None:
            continue
        bs, cs = base_samples.get(bt.name, empty), cand_samples.get(bt.name, empty)
        rows.append(TierRow(
            tier=bt.name, priority=bt.priority, requests=(bt.requests, ct.requests),
            served=(bt.by_class.get("served", 0), ct.by_class.get("served", 0)),
            drop_rate=(bt.drop_rate.value, ct.drop_rate.value),
            ttft_p50_ms=(_q(bs.ttft_ms, 0.5), _q(cs.ttft_ms, 0.5)),
            ttft_p99_ms=(_q(bs.ttft_ms, 0.99), _q(cs.ttft_ms, 0.99)),
            e2e_p99_ms=(_q(bs.e2e_ms, 0.99), _q(cs.e2e_ms, 0.99)),
            goodput_per_s=(bt.goodput_per_s, ct.goodput_per_s),
        ))
        for m_index, (metric, a, b) in enumerate((("ttft", bs.ttft_ms, cs.ttft_ms), ("e2e", bs.e2e_ms, cs.e2e_ms))):
            mw_two = mann_whitney_u(a, b, "two-sided")
            mw_gt = mann_whitney_u(a, b, "greater")
            shifts.append(Shift(
                tier=bt.name, metric=metric, n_base=len(a), n_cand=len(b), median_base=_q(a, 0.5),
                median_cand=_q(b, 0.5), u=_fin(mw_two.u), z=mw_gt.z, p_two_sided=mw_two.p, p_greater=mw_gt.p,
                prob_superiority=mw_two.prob_superiority, ps_low=mw_two.ps_low, ps_high=mw_two.ps_high,
            ))
            judged = len(a) >= rule.min_samples and len(b) >= rule.min_samples
            qd = bootstrap_quantile_diff(a, b, 0.99, n_boot=n_boot, seed=seed + 97 * t_index + m_index)
            threshold = f"+{text.pct(rule.latency_rel, 0)}"
            if rule.latency_abs_ms:
                threshold += f" and +{text.plain(rule.latency_abs_ms)} ms"
            practical = bool(
                judged and not math.isnan(qd.rel) and qd.rel > rule.latency_rel and qd.diff > rule.latency_abs_ms
            )
            tests.append(Test(
                tier=bt.name, metric=f"{metric}_p99", base=_fin(qd.base), cand=_fin(qd.cand), diff=_fin(qd.diff),
                low=_fin(qd.low), high=_fin(qd.high), rel=_fin(qd.rel), rel_low=_fin(qd.rel_low),
                rel_high=_fin(qd.rel_high),
                test=f"moving-block bootstrap of p99 (block {qd.block}, {qd.n_boot} resamples)",
                p=qd.p_greater if judged else 1.0, threshold=threshold, practical=practical, judged=judged,
                note="" if judged else f"fewer than {rule.min_samples} served requests on a side: not judged",
            ))
        tp = two_proportion_z(bt.drop_rate.k, bt.drop_rate.n, ct.drop_rate.k, ct.drop_rate.n, "greater")
        judged = bt.drop_rate.n > 0 and ct.drop_rate.n > 0
        tests.append(Test(
            tier=bt.name, metric="drop_rate", base=_fin(tp.p1), cand=_fin(tp.p2), diff=_fin(tp.diff),
            low=_fin(tp.low), high=_fin(tp.high), test="two-proportion z-test (pooled)", p=tp.p if judged else 1.0,
            threshold=f"+{text.plain(rule.drop_abs * 100)} points", judged=judged,
            practical=bool(judged and tp.diff > rule.drop_abs),
        ))
    adjusted = holm([t.p for t in tests]) if rule.correction == "holm" else [t.p for t in tests]
    regressions: list[str] = []
    for test, p_adj in zip(tests, adjusted, strict=True):
        test.p_adjusted = p_adj
        test.significant = p_adj < rule.alpha
        worse = (test.rel if test.metric != "drop_rate" else test.diff) or 0.0
        limit = rule.latency_rel if test.metric != "drop_rate" else rule.drop_abs
        test.regression = test.judged and test.practical and is_regression(p_adj, worse, limit, rule.alpha)
        if test.regression:
            regressions.append(describe_test(test))
    flips = slo_flips(base, cand)
    for flip in flips:
        if " failed" in flip:  # a pass that became a fail changes the gate's answer: never only a footnote
            regressions.append(flip)
        else:
            warnings.append(flip)
    invalid = not rows or (not rule.allow_invalid and (not base_side.valid or not cand_side.valid))
    verdict: Literal["ok", "regression", "invalid"] = "invalid" if invalid else ("regression" if regressions else "ok")
    return Comparison(baseline=base_side, candidate=cand_side, tiers=rows, tests=tests, shifts=shifts,
                      regressions=regressions, warnings=warnings, verdict=verdict, slo_flips=flips, changes=changes)


def slo_flips(base: Summary, cand: Summary) -> list[str]:
    """SLO checks (same tier and check) that passed in the baseline and do not pass in the candidate.

    Judged on each run's own verdicts, whatever the significance tests say: the gate's answer changed.
    """
    before = {(v.tier, v.check): v for v in base.verdicts}
    out = []
    for v in cand.verdicts:
        old = before.get((v.tier, v.check))
        if old is None or not old.passed or v.passed:
            continue
        state = "vacuous" if v.vacuous else ("inconclusive" if v.inconclusive else "failed")
        out.append(f"{v.tier} {v.check}: passed in the baseline, {state} in the candidate ({v.message})")
    return out


def describe_test(test: Test) -> str:
    """One sentence for a test result."""
    if test.metric == "drop_rate":
        ci = f"{text.signed_points(test.low)} … {text.signed_points(test.high)}"
        return (f"{test.tier}: not served {text.pct(test.base, 1)} → {text.pct(test.cand, 1)} "
                f"({text.signed_points(test.diff)}, 95 % CI {ci}; {text.p_clause(test.p_adjusted)} adjusted)")
    name = test.metric.replace("_p99", "").upper()
    ci = f"{text.signed_pct(test.rel_low)} … {text.signed_pct(test.rel_high)}"
    return (f"{test.tier}: {name} p99 {text.ms(test.base)} → {text.ms(test.cand)} ({text.signed_pct(test.rel)}, "
            f"95 % CI {ci}; {text.p_clause(test.p_adjusted)} adjusted)")


def compare_runs(run_dirs: Sequence[Path], rule: RegressionRule | None = None, seed: int = 0,
                 n_boot: int = 2000) -> CompareResult:
    """Compare every run after the first (candidates) with the first (baseline)."""
    rule = rule or RegressionRule()
    if len(run_dirs) < 2:
        raise ValueError("compare needs a baseline and at least one candidate run")
    base_dir = Path(run_dirs[0])
    base, base_samples = load_run(base_dir)
    comparisons = []
    for cand_dir in run_dirs[1:]:
        cand, cand_samples = load_run(Path(cand_dir))
        comparisons.append(compare_pair(base, base_samples, cand, cand_samples, rule, seed=seed, n_boot=n_boot,
                                        base_dir=base_dir, cand_dir=Path(cand_dir)))
    return result_of(comparisons, rule)


def result_of(comparisons: list[Comparison], rule: RegressionRule) -> CompareResult:
    """Wrap comparisons with the exit code ``gate`` would use: 2 invalid, 1 regression, 0 ok."""
    if any(c.verdict == "invalid" for c in comparisons):
        code = 2
    elif any(c.verdict == "regression" for c in comparisons):
        code = 1
    else:
        code = 0
    rule_dict = {k: getattr(rule, k) for k in rule.__dataclass_fields__}
    return CompareResult(alpha=rule.alpha, rule=rule_dict, comparisons=comparisons, exit_code=code)
