"""SLO-boundary search: bisect the offered load to the highest level at which every tier meets its SLOs.

Pure functions over audited sweep steps (``audit.knee.Step``); the command line runs the probes.
A probe passes when every tier with an SLO passes its checks (point verdicts), and is *confident*
when every check's 95 % interval lies on the verdict's side of its threshold and the run is valid.
A probe that is not confident — an interval straddles a threshold, too few samples, an invalid
run — is repeated with another seed (``repeats`` times at most); a level still not confident is
flagged inconclusive, its direction taken from the majority of its probes (a tie counts as a
failure: fail closed). The answer is the bracket [highest passing level, lowest failing level],
with whether each end is confident, and the cliffs between adjacent levels.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rushhour.audit import text
from rushhour.studies.knee import Check, Step, SweepResult

Outcome = Literal["pass", "fail"]
BoundaryStatus = Literal["within", "above_range", "below_range", "no_slo"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class SearchSettings:
    """The range and the stopping rules of a search."""

    low: float  # the lowest scale (× today's peak) probed
    high: float  # the highest
    precision: float = 0.10  # stop when the bracket's upper end is within this fraction of its lower end
    max_probes: int = 8  # runs in all, repeats included
    repeats: int = 1  # extra probes of a level whose probe straddled a threshold
    cliff_drop: float = 0.10  # a jump in not-served share (absolute) between adjacent levels …
    cliff_ttft_x: float = 3.0  # … or a TTFT p99 ratio …
    cliff_span_x: float = 1.5  # … between levels at most this far apart (load ratio) is a cliff

    def __post_init__(self) -> None:
        if not 0 < self.low < self.high:
            raise ValueError("the search range needs 0 < low < high, got "
                             f"{text.plain(self.low)}..{text.plain(self.high)}")
        if self.precision <= 0 or self.max_probes < 2 or self.repeats < 0:
            raise ValueError("the search needs precision > 0, at least 2 probes and repeats ≥ 0")


# --------------------------------------------------------------------------- one probe


class TierProbe(_Model):
    """One tier at one probe: its verdict and the interval of every check."""

    tier: str
    outcome: Outcome | Literal["no_slo", "no_data"]
    confident: bool = False
    checks: list[str] = Field(default_factory=list)  # "ttft_ms.p99 812 ms [760 ms, 880 ms] ≤ 2.00 s: pass"


class Probe(_Model):
    """One run of the search."""

    index: int  # the sweep step it is
    scale: float
    offered_rps: float
    seed: int
    outcome: Outcome
    confident: bool  # every check's interval on the verdict's side, and the run valid
    valid: bool
    tiers: list[TierProbe]
    line: str = ""


def _num(check: str, value: float | None) -> str:
    if value is None:
        return "–"
    if "_ms" in check:
        return text.ms(value)
    return text.pct(value, 1) if 0 <= value <= 1 else text.plain(value)


def check_line(c: Check) -> str:
    """A check with its interval: ``ttft_ms.p99 812 ms [760 ms, 880 ms] ≤ 2.00 s: pass (confident)``."""
    op = "≥" if c.check.startswith("min_") or c.check == "floor_share" else "≤"
    interval = f" [{_num(c.check, c.low)}, {_num(c.check, c.high)}]" if c.low is not None and c.high is not None else ""
    if c.inconclusive:
        verdict = "inconclusive (too few samples)"
    else:
        verdict = ("pass" if c.passed else "fail") + ("" if c.confident else " (interval straddles the threshold)")
    return f"{c.check} {_num(c.check, c.observed)}{interval} vs {op} {_num(c.check, c.threshold)}: {verdict}"


def probe_outcome(step: Step, seed: int = 0) -> Probe:
    """A step judged as a search probe: pass or fail (point verdicts), and whether that is confident."""
    tiers: list[TierProbe] = []
    for t in step.tiers:
        if t.status in ("no_slo", "no_data"):
            tiers.append(TierProbe(tier=t.tier, outcome=t.status))
            continue
        outcome: Outcome = "pass" if t.status == "pass" else "fail"
        tiers.append(TierProbe(tier=t.tier, outcome=outcome, confident=t.confident,
                               checks=[check_line(c) for c in t.checks]))
    judged = [t for t in tiers if t.outcome in ("pass", "fail")]
    failed = [t for t in judged if t.outcome == "fail"]
    overall: Outcome = "fail" if failed or not judged else "pass"
    if failed:  # one confident failure decides, whatever else straddles (an invalid run decides nothing)
        confident = any(t.confident for t in failed) and step.valid
    else:
        confident = bool(judged) and all(t.confident for t in judged) and step.valid
    probe = Probe(index=step.index, scale=step.scale, offered_rps=step.offered_rps, seed=seed, outcome=overall,
                  confident=confident, valid=step.valid, tiers=tiers)
    probe.line = probe_line(probe, step)
    return probe


def probe_line(probe: Probe, step: Step) -> str:
    """One line per probe for the console: load, outcome and each judged tier's checks with intervals."""
    sure = "confident" if probe.confident else "not confident"
    parts = [f"{text.scale(probe.scale)} ({text.rps(probe.offered_rps)}) → {probe.outcome} ({sure})"]
    if not step.valid:
        parts.append("run invalid: " + "; ".join(step.reasons))
    for t in probe.tiers:
        if t.checks:
            parts.append(f"{t.tier}: " + "; ".join(t.checks))
    return " — ".join(parts)


# --------------------------------------------------------------------------- levels and the next probe


@dataclass(frozen=True)
class Level:
    """One probed load level: its direction, whether that is confident, and its probes."""

    scale: float
    outcome: Outcome
    confident: bool
    probes: int
    noisy: bool = False  # confident probes disagreed


def level_verdict(probes: Sequence[Probe], repeats: int) -> Level | None:
    """A level's verdict from its probes, or None when none was confident and it may be probed again."""
    scale = probes[0].scale
    sure = {p.outcome for p in probes if p.confident}
    if sure == {"pass", "fail"}:
        return Level(scale, "fail", False, len(probes), noisy=True)  # confident both ways: fail closed
    if sure:
        return Level(scale, sure.pop(), True, len(probes))
    if len(probes) <= repeats:
        return None
    passes = sum(p.outcome == "pass" for p in probes)
    return Level(scale, "pass" if passes * 2 > len(probes) else "fail", False, len(probes))  # a tie fails


def levels(probes: Sequence[Probe], repeats: int, final: bool = False) -> dict[float, Level | None]:
    """Every probed scale and its verdict so far (None: probe it again); ``final``: no more probes come."""
    by_scale: dict[float, list[Probe]] = {}
    for p in probes:
        by_scale.setdefault(p.scale, []).append(p)
    return {s: level_verdict(ps, 0 if final else repeats) for s, ps in sorted(by_scale.items())}


def bracket(judged: dict[float, Level | None]) -> tuple[float | None, float | None]:
    """(highest passing scale below the lowest failing one, that lowest failing scale)."""
    fails = [s for s, lv in judged.items() if lv is not None and lv.outcome == "fail"]
    hi = min(fails) if fails else None
    passes = [s for s, lv in judged.items() if lv is not None and lv.outcome == "pass" and (hi is None or s < hi)]
    return (max(passes) if passes else None), hi


def midpoint(lo: float, hi: float) -> float:
    """The geometric middle of a bracket (load ratios matter, not differences), to 4 significant digits."""
    mid = math.sqrt(lo * hi)
    return round(mid, 3 - math.floor(math.log10(mid)))


def next_scale(probes: Sequence[Probe], s: SearchSettings) -> float | None:
    """The next scale to probe, or None when the search is done (bracket narrow enough, or out of probes)."""
    if len(probes) >= s.max_probes:
        return None
    judged = levels(probes, s.repeats)
    pending = [scale for scale, lv in judged.items() if lv is None]
    if pending:
        return pending[0]  # a level that was not confident is probed again before the search moves on
    if s.low not in judged:
        return s.low
    low = judged[s.low]
    if low is None or low.outcome != "pass":
        return None  # the lowest level already misses: the boundary is below the range
    if s.high not in judged:
        return s.high
    lo, hi = bracket(judged)
    if hi is None or lo is None:
        return None  # the highest level passes: the boundary is above the range
    if hi / lo - 1 <= s.precision:
        return None
    mid = midpoint(lo, hi)
    return None if mid in judged or not lo < mid < hi else mid


# --------------------------------------------------------------------------- the result


class Cliff(_Model):
    """A steep change between two adjacent probed levels."""

    tier: str
    from_scale: float
    to_scale: float
    what: str  # "not served 0 % → 35 %", "TTFT p99 180 ms → 2.4 s"


class Boundary(_Model):
    """``sweep.json`` ``search``: the SLO boundary with its bracket, every probe, the cliffs."""

    status: BoundaryStatus
    low: float
    high: float
    precision: float
    max_probes: int
    repeats: int
    pass_scale: float | None = None  # highest level every tier passed (confidently)
    fail_scale: float | None = None  # lowest level that did not pass
    pass_rps: float | None = None
    fail_rps: float | None = None
    pass_confident: bool = False  # the lower end passed confidently (else: inconclusive, by majority)
    fail_confident: bool = False  # the upper end failed confidently
    width: float | None = None  # fail_scale / pass_scale − 1
    resolved: bool = False  # the bracket is within the precision
    noisy: bool = False  # a level passed above one that did not
    inconclusive_scales: list[float] = Field(default_factory=list)  # levels judged without confidence
    probes: list[Probe]
    cliffs: list[Cliff] = Field(default_factory=list)
    sentence: str = ""


def _rps(probes: Sequence[Probe], scale: float | None) -> float | None:
    values = [p.offered_rps for p in probes if p.scale == scale]
    return sum(values) / len(values) if values else None


def find_cliffs(steps: Sequence[Step], s: SearchSettings) -> list[Cliff]:
    """Steep changes of a tier's not-served share or TTFT p99 between adjacent levels close in load."""
    by_scale: dict[float, list[Step]] = {}
    for step in steps:
        by_scale.setdefault(step.scale, []).append(step)
    ordered = sorted(by_scale)
    out: list[Cliff] = []
    for a, b in itertools.pairwise(ordered):
        if b / a > s.cliff_span_x:
            continue
        tiers = dict.fromkeys(t.tier for st in by_scale[a] + by_scale[b] for t in st.tiers)
        for name in tiers:
            da, db = _mean_of(by_scale[a], name, "drop_rate"), _mean_of(by_scale[b], name, "drop_rate")
            ta, tb = _mean_of(by_scale[a], name, "ttft_p99_ms"), _mean_of(by_scale[b], name, "ttft_p99_ms")
            if da is not None and db is not None and db - da >= s.cliff_drop:
                out.append(Cliff(tier=name, from_scale=a, to_scale=b,
                                 what=f"not served {text.pct(da, 1)} → {text.pct(db, 1)}"))
            elif ta and tb is not None and tb / ta >= s.cliff_ttft_x:
                out.append(Cliff(tier=name, from_scale=a, to_scale=b,
                                 what=f"TTFT p99 {text.ms(ta)} → {text.ms(tb)}"))
    return out


def _mean_of(steps: Sequence[Step], tier: str, attr: str) -> float | None:
    values = [getattr(t, attr) for st in steps if (t := st.tier(tier)) is not None and getattr(t, attr) is not None]
    return sum(values) / len(values) if values else None


def boundary(probes: Sequence[Probe], steps: Sequence[Step], s: SearchSettings) -> Boundary:
    """The search's answer from its probes (and their steps, for the cliffs)."""
    judged = levels(probes, s.repeats, final=True)  # a level whose repeat never came is judged as it stands
    out = Boundary(status="within", low=s.low, high=s.high, precision=s.precision, max_probes=s.max_probes,
                   repeats=s.repeats, probes=list(probes), cliffs=find_cliffs(steps, s))
    out.inconclusive_scales = [scale for scale, lv in judged.items() if lv is not None and not lv.confident]
    if all(t.outcome in ("no_slo", "no_data") for p in probes for t in p.tiers):
        out.status = "no_slo"
    lo, hi = bracket(judged)
    out.pass_scale, out.fail_scale = lo, hi
    out.pass_rps, out.fail_rps = _rps(probes, lo), _rps(probes, hi)
    if out.status != "no_slo":
        if lo is None:
            out.status = "below_range"
        elif hi is None:
            out.status = "above_range"
    low_level, high_level = judged.get(lo) if lo is not None else None, judged.get(hi) if hi is not None else None
    out.pass_confident = bool(low_level and low_level.confident)
    out.fail_confident = bool(high_level and high_level.confident)
    if lo is not None and hi is not None:
        out.width = hi / lo - 1
        out.resolved = out.width <= s.precision
    out.noisy = any(lv is not None and (lv.noisy or (lv.outcome == "pass" and hi is not None and scale > hi))
                    for scale, lv in judged.items())
    out.sentence = boundary_sentence(out)
    return out


def boundary_sentence(b: Boundary) -> str:
    """The plain answer of a search."""
    def at(scale: float | None, rps: float | None) -> str:
        return f"{text.rps(rps)} ({text.scale(scale)})"

    unsure = " (not confident: an interval straddles a threshold, too few samples or an invalid run)"
    if b.status == "no_slo":
        return "No tier has an SLO: there is no boundary to search (add slo: to a tier)."
    if b.status == "below_range":
        return (f"Some tier misses its SLOs already at the lowest level tested, {at(b.fail_scale, b.fail_rps)}"
                f"{'' if b.fail_confident else unsure}: the boundary is below the range; lower --scale.")
    if b.status == "above_range":
        return (f"Every tier meets its SLOs up to the highest level tested, {at(b.pass_scale, b.pass_rps)}"
                f"{'' if b.pass_confident else unsure}: the boundary is above the range; raise --scale.")
    answer = (f"SLO boundary between {at(b.pass_scale, b.pass_rps)}, where every tier meets its SLOs"
              f"{' (confident)' if b.pass_confident else ' (inconclusive: passed by majority, not confidently)'}, "
              f"and {at(b.fail_scale, b.fail_rps)}, where a tier misses them"
              f"{' (confident)' if b.fail_confident else ' (inconclusive: failed by majority, not confidently)'}")
    if b.width is not None:
        answer += f"; bracket {text.pct(b.width, 0)} wide" + (
            "" if b.resolved else f", wider than the {text.pct(b.precision, 0)} asked (raise --max-probes)")
    if b.noisy:
        answer += "; confident probes disagree or a higher level passed again: the boundary is noisy, use longer steps"
    if b.cliffs:
        answer += "; cliff: " + "; ".join(
            f"{c.tier} {c.what} between {text.scale(c.from_scale)} and {text.scale(c.to_scale)}" for c in b.cliffs)
    return answer + "."


class SearchResult(SweepResult):
    """``sweep.json`` of ``sweep --search``: the sweep over every probe, plus the boundary."""

    search: Boundary
