"""SLO verdicts per tier, judged on the point estimate or on the pessimistic 95 % bound.

Fail closed: a latency percentile judged on too few samples is not a pass. Under ``point`` it is
inconclusive (the gate exits 2 and says why); under ``bound`` it fails, because no distribution-free
95 % upper bound exists. Minimum samples (docs/audit.md):

- point: pN needs n ≥ ⌈1 / (1 − q)⌉ (p50 ≥ 2, p90 ≥ 10, p95 ≥ 20, p99 ≥ 100): fewer, and the
  "percentile" is just the largest value seen.
- bound: the order-statistic upper bound needs n ≥ ln(0.05) / ln(q) (p50 ≥ 5, p90 ≥ 29,
  p95 ≥ 59, p99 ≥ 299): fewer, and even the largest value seen is not a 95 % upper bound.

A percentile that right-censored waits make only a lower bound (``Percentiles.lower_bound``) fails
when that bound already exceeds the limit, and is inconclusive otherwise.
"""

from __future__ import annotations

import math
from typing import Literal

from rushhour.audit import text
from rushhour.audit.summary import Percentiles, Rate, TierSummary, Validity, Verdict
from rushhour.records.manifest import RunManifest
from rushhour.scenarios.model import SLO

Judge = Literal["point", "bound"]
EXIT_PASS, EXIT_FAIL, EXIT_INVALID = 0, 1, 2


def _show(check: str, value: float) -> str:
    """A value in the unit a person reads for this check: ms/s for latencies, % for shares."""
    return text.ms(value) if "_ms" in check else text.pct(value, 2)


def _verdict(tier: str, check: str, threshold: float, observed: float | None, bound: float | None,
             judge: Judge, upper: bool) -> Verdict:
    """``upper``: the SLO is a ceiling (latency, drop rate); else a floor (goodput, floor share)."""
    value = bound if judge == "bound" else observed
    if value is None:
        return Verdict(tier=tier, check=check, threshold=threshold, observed=observed, bound=bound, judge=judge,
                       passed=False, message=f"{tier} {check}: no samples to judge (limit {_show(check, threshold)})")
    passed = value <= threshold if upper else value >= threshold
    op = "≤" if upper else "≥"
    used = "bound" if judge == "bound" else "observed"
    shown, limit = _show(check, value), _show(check, threshold)
    message = (f"{tier} {check}: {used} {shown} {op} {limit}" if passed
               else f"{tier} {check}: {used} {shown} not {op} {limit}")
    return Verdict(tier=tier, check=check, threshold=threshold, observed=observed, bound=bound, judge=judge,
                   passed=passed, message=message)


_LEVEL = 0.95


def min_samples(key: str, judge: Judge) -> int:
    """Fewest samples a percentile (``p50`` … ``p99``) can be judged on; 1 for ``max``/``mean``."""
    if not key.startswith("p") or not key[1:].isdigit():
        return 1
    q = int(key[1:]) / 100.0
    if judge == "point":
        return math.ceil(1.0 / (1.0 - q) - 1e-9)
    return math.ceil(math.log(1.0 - _LEVEL) / math.log(q) - 1e-9)


def _unjudgeable(tier: str, check: str, threshold: float, observed: float | None, bound: float | None,
                 judge: Judge, why: str) -> Verdict:
    """Not enough evidence: inconclusive under ``point`` (exit 2), a fail under ``bound`` (fail closed)."""
    inconclusive = judge == "point"
    verb = "inconclusive" if inconclusive else "fails under bound judging"
    return Verdict(tier=tier, check=check, threshold=threshold, observed=observed, bound=bound, judge=judge,
                   passed=False, inconclusive=inconclusive,
                   message=f"{tier} {check}: {verb}: {why} (limit {_show(check, threshold)})")


def _latency(tier: str, metric: str, pct: Percentiles, slo_spec: object, judge: Judge) -> list[Verdict]:
    out = []
    for key, threshold in slo_spec.items():  # type: ignore[attr-defined]
        check = f"{metric}.{key}"
        observed = getattr(pct, key)
        ci = pct.ci.get(key)
        # max has no interval: the worst observed value is its own pessimistic bound
        bound = ci[1] if ci else (observed if key in ("max", "mean") else None)
        need = min_samples(key, judge)
        if key in pct.lower_bound and observed is not None:
            if observed > threshold:
                out.append(Verdict(tier=tier, check=check, threshold=threshold, observed=observed, bound=observed,
                                   judge=judge, passed=False,
                                   message=f"{tier} {check}: at least {_show(check, observed)} (censored waits) "
                                           f"not ≤ {_show(check, threshold)}"))
            else:
                out.append(Verdict(
                    tier=tier, check=check, threshold=threshold, observed=observed, bound=None, judge=judge,
                    passed=False, inconclusive=True,
                    message=f"{tier} {check}: inconclusive: only known to be ≥ {_show(check, observed)} "
                            f"({pct.censored} of {pct.n} waits censored by the run's end); limit "
                            f"{_show(check, threshold)}"))
        elif observed is not None and pct.n < need:
            why = (f"{pct.n} sample(s), {key} needs ≥ {need} to be "
                   + ("estimated" if judge == "point" else "bounded at 95 %"))
            out.append(_unjudgeable(tier, check, threshold, observed, bound, judge, why))
        elif observed is not None and judge == "bound" and bound is None:
            out.append(_unjudgeable(tier, check, threshold, observed, None, judge,
                                    "no 95 % upper bound exists (too many waits censored)"))
        else:
            out.append(_verdict(tier, check, threshold, observed, bound, judge, upper=True))
    return out


def vacuous(tier: str, check: str, threshold: float, judge: Judge, why: str) -> Verdict:
    """A check that judges nothing in this run: not a pass, not a fail; said so in its line."""
    return Verdict(tier=tier, check=check, threshold=threshold, observed=None, bound=None, judge=judge,
                   passed=False, vacuous=True, message=f"{tier} {check}: vacuous: {why}")


def _abandon(tier: TierSummary, limit: float, judge: Judge) -> list[Verdict]:
    """``max_abandon_rate`` per persona; vacuous for one whose users never give up (no patience, none abandoned)."""
    out = []
    for p in tier.personas:
        if p.abandon_rate is None or not p.abandon_rate.n:
            continue
        check = f"persona.{p.persona}.max_abandon_rate"
        if not p.patience and not p.abandoned:
            out.append(vacuous(tier.name, check, limit, judge, "no patience set (its users never give up)"))
        else:
            out.append(_rate(tier.name, check, limit, p.abandon_rate, judge, upper=True))
    return out or [vacuous(tier.name, "max_abandon_rate", limit, judge, "no requests from any persona")]


def _deadlines(tier: TierSummary, limit: float, judge: Judge) -> list[Verdict]:
    """``max_deadline_miss_rate`` on agent tasks and chat sessions; vacuous where none had a deadline."""
    out = []
    for label, stats in (("tasks", tier.tasks), ("sessions", tier.sessions)):
        if stats is None:
            continue
        check = f"{label}.max_deadline_miss_rate"
        if stats.with_deadline == 0 and stats.deadline_miss_rate.n:
            out.append(vacuous(tier.name, check, limit, judge, f"none of its {stats.n} {label} had a deadline"))
        else:
            out.append(_rate(tier.name, check, limit, stats.deadline_miss_rate, judge, upper=True))
    if not out:
        out.append(vacuous(tier.name, "max_deadline_miss_rate", limit, judge, "no agent tasks or chat sessions"))
    return out


def _rate(tier: str, check: str, threshold: float, rate: Rate, judge: Judge, upper: bool) -> Verdict:
    bound = rate.high if upper else rate.low
    return _verdict(tier, check, threshold, rate.value, bound, judge, upper)


def judge_of(slo: SLO, judge_override: str | None) -> Judge:
    """The judge a tier's checks use: ``--judge`` when given, else the SLO's."""
    return "bound" if (judge_override or slo.judge) == "bound" else "point"


def tier_verdicts(tier: TierSummary, slo: SLO, judge_override: str | None) -> list[Verdict]:
    """Every check the tier's SLO names."""
    judge = judge_of(slo, judge_override)
    name = tier.name
    out: list[Verdict] = []
    for metric in ("ttft_ms", "ttft_from_intended_ms", "tpot_ms", "e2e_ms"):
        spec = getattr(slo, metric)
        if spec is not None:
            out += _latency(name, metric, getattr(tier.latency, metric), spec, judge)
    if slo.max_drop_rate is not None:
        out.append(_rate(name, "max_drop_rate", slo.max_drop_rate, tier.drop_rate, judge, upper=True))
    if slo.max_abandon_rate is not None:  # the session SLA, judged per persona of the tier
        out += _abandon(tier, slo.max_abandon_rate, judge)
    for cls, limit in slo.max_drop_rate_by_class.items():
        rate = tier.drop_rate_by_class.get(cls) or Rate(k=0, n=tier.drop_rate.n, value=None, low=None, high=None)
        out.append(_rate(name, f"max_drop_rate_by_class.{cls}", limit, rate, judge, upper=True))
    if slo.max_429_share is not None:
        out.append(_rate(name, "max_429_share", slo.max_429_share, tier.share_429, judge, upper=True))
    if slo.max_503_share is not None:
        out.append(_rate(name, "max_503_share", slo.max_503_share, tier.share_503, judge, upper=True))
    if slo.min_goodput is not None:
        out.append(_rate(name, "min_goodput", slo.min_goodput, tier.goodput, judge, upper=False))
    if slo.floor_share is not None:
        share = tier.floor.share
        low = tier.floor.rate.low if tier.floor.rate else None
        if tier.saturation is None and share is None:
            out.append(vacuous(name, "floor_share", slo.floor_share, judge, "no saturation window"))
        elif tier.floor.rate is None or not tier.floor.rate.n:
            # saturation windows exist but no tier got any goodput in them: this tier's share is 0
            ok = slo.floor_share <= 0.0
            out.append(Verdict(tier=name, check="floor_share", threshold=slo.floor_share, observed=0.0,
                               bound=0.0, judge=judge, passed=ok,
                               message=f"{name} floor_share: no tier got any goodput during saturation, so "
                                       f"{name}'s share is 0.00 % " + ("≥" if ok else "not ≥")
                                       + f" {_show('floor_share', slo.floor_share)}"))
        else:
            out.append(_verdict(name, "floor_share", slo.floor_share, share, low, judge, upper=False))
    if slo.max_deadline_miss_rate is not None:
        out += _deadlines(tier, slo.max_deadline_miss_rate, judge)
    if slo.max_preempted_in_progress is not None:
        out.append(_preempted(tier, slo.max_preempted_in_progress, judge))
    return out


def cut_streams(tier: TierSummary) -> int:
    """The tier's streams cut mid-answer (class ``failed`` after a 2xx): a router's kill or the network's."""
    return sum(count for status, count in tier.status_by_class.get("failed", {}).items() if status.startswith("2"))


def _preempted(tier: TierSummary, limit: int, judge: Judge) -> Verdict:
    """``max_preempted_in_progress``: a count ceiling on attempts killed after admission (every ``preempted``: an
    llm-d revocation's 429 evicted, a stream the router says it evicted, an SGLang abort). A stream cut after its
    200 (class ``failed``, status 2xx) may be a revocation too: nothing on the wire tells a router's kill from the
    network's, so the check is judged on both (fail closed: an unnamed kill never keeps the promise)."""
    n = tier.preempted_in_progress
    cut = cut_streams(tier)
    ok = n + cut <= limit
    after = tier.preempted_after_first_token
    streamed = f" ({after} after their first token)" if after else ""
    maybe = f" and {cut} stream(s) cut mid-answer, a kill or the network's" if cut else ""
    return Verdict(tier=tier.name, check="max_preempted_in_progress", threshold=float(limit), observed=float(n),
                   bound=float(n + cut), judge=judge, passed=ok,
                   message=f"{tier.name} max_preempted_in_progress: {n} request(s) killed in progress{streamed}{maybe} "
                           + ("≤" if ok else "not ≤") + f" {limit}")


def abort_verdicts(manifest: RunManifest) -> list[Verdict]:
    """A failed ``early_abort`` check when the run was stopped early (fail closed: a run that could not
    pass, or a stack over-saturated, never gates green, whatever the checks on its partial data say)."""
    reason = manifest.stop_reason or ""
    if not reason.startswith("aborted"):
        return []
    info = manifest.abort or {}
    at = info.get("at_s")
    when = f" at {text.seconds(float(at))}" if isinstance(at, int | float) else ""
    message = f"run aborted early{when}: {info.get('message') or reason}"
    # threshold: the seconds the schedule planned; observed: when it was stopped
    return [Verdict(tier=str(info.get("tier") or "run"), check="early_abort", threshold=manifest.duration_s or 0.0,
                    observed=float(at) if isinstance(at, int | float) else None, bound=None, judge="point",
                    passed=False, message=message)]


def exit_code(validity: Validity, verdicts: list[Verdict]) -> tuple[bool, int]:
    """(passed, exit code): 2 when the run is invalid, 1 when a check failed, 2 when one is inconclusive (a
    NOT JUDGED tier's ``judged`` check is) or no check judged anything (none at all, or only vacuous ones:
    a gate that cannot fail is not a pass), else 0. Vacuous checks are neither a pass nor a fail."""
    if not validity.valid:
        return False, EXIT_INVALID
    verdicts = [v for v in verdicts if not v.vacuous]
    if not verdicts:
        return False, EXIT_INVALID
    if any(not v.passed and not v.inconclusive for v in verdicts):
        return False, EXIT_FAIL
    if any(v.inconclusive for v in verdicts):
        return False, EXIT_INVALID
    return True, EXIT_PASS
