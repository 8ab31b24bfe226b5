"""Did a tier's SLO judge anything? A starved tier fails; a tier whose every check was vacuous is NOT JUDGED.

Fail closed: a check that judges nothing in a run (``floor_share`` without a saturation window, a
deadline-miss rate without deadlines, an abandon rate without patience) is no evidence of service, so a
tier with only such checks is not a pass, and a tier that sent requests and had none served is never
one, whatever its SLO names. ``tier_state`` is the one reading of a tier's verdicts that the gate's
reports share.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from rushhour.audit.summary import TierSummary, Verdict
from rushhour.scenarios.model import SLO

MIN_SERVED = 1  # served requests a tier with an SLO needs when it sent any (``slo.min_served`` raises it)
MIN_SERVED_CHECK = "min_served"
JUDGED_CHECK = "judged"  # the tier-level check of a NOT JUDGED tier

State = Literal["none", "pass", "fail", "inconclusive", "not_judged"]


def names_checks(slo: SLO) -> bool:
    """True when the SLO names at least one check (the judge and the allowance alone name none)."""
    return not slo.is_empty()


def starved_verdict(tier: TierSummary, slo: SLO, judge: Literal["point", "bound"]) -> Verdict | None:
    """``min_served``: fails when the tier sent requests and fewer than the minimum were served.

    Shown only when it fails, or when the SLO sets ``min_served`` itself (then judged even on no requests).
    """
    if not names_checks(slo):
        return None
    sent = tier.drop_rate.n  # sent logical requests (not_sent left out)
    served = sent - tier.drop_rate.k
    need = slo.min_served or MIN_SERVED
    explicit = slo.min_served is not None
    if not explicit and sent == 0:
        return None
    passed = served >= need
    if passed and not explicit:
        return None
    if passed:
        message = f"{tier.name} {MIN_SERVED_CHECK}: {served:,} of {sent:,} sent served ≥ {need:,}"
    elif served == 0 and sent:
        message = f"{tier.name} {MIN_SERVED_CHECK}: starved: none of its {sent:,} sent request(s) was served"
    else:
        message = (f"{tier.name} {MIN_SERVED_CHECK}: starved: {served:,} of {sent:,} sent request(s) served, "
                   f"needs ≥ {need:,}")
    return Verdict(tier=tier.name, check=MIN_SERVED_CHECK, threshold=float(need), observed=float(served), bound=None,
                   judge=judge, passed=passed, message=message)


def not_judged_verdict(tier: str, verdicts: Iterable[Verdict], slo: SLO,
                       judge: Literal["point", "bound"]) -> Verdict | None:
    """The tier's ``judged`` check when every check of its SLO was vacuous: inconclusive (the gate exits 2),
    or itself vacuous when the SLO sets ``allow_not_judged``; None when something was judged."""
    mine = [v for v in verdicts if v.tier == tier]
    if not mine or not all(v.vacuous for v in mine):
        return None
    lines = (v.message[len(tier) + 1:] if v.message.startswith(tier + " ") else v.message for v in mine)
    why = "; ".join(line.replace(": vacuous: ", ": ", 1) for line in lines)
    allowed = slo.allow_not_judged
    tail = " (allowed by allow_not_judged)" if allowed else ""
    return Verdict(tier=tier, check=JUDGED_CHECK, threshold=1.0, observed=0.0, bound=None, judge=judge,
                   passed=False, inconclusive=not allowed, vacuous=allowed,
                   message=f"{tier} {JUDGED_CHECK}: NOT JUDGED: every check was vacuous ({why}){tail}")


@dataclass(frozen=True)
class TierState:
    """A tier's verdicts read together: its state and the counts a report shows beside it."""

    state: State
    checks: int  # checks that judged something (vacuous ones and the tier's ``judged`` check left out)
    failed: int
    unsure: int  # inconclusive checks
    vacuous: int
    allowed: bool = False  # not judged, and the tier's SLO allows it


def tier_state(verdicts: Iterable[Verdict], tier: str) -> TierState:
    """fail (a check failed) > not_judged (every check vacuous) > inconclusive > pass; none without checks."""
    mine = [v for v in verdicts if v.tier == tier]
    marker = next((v for v in mine if v.check == JUDGED_CHECK), None)
    checks = [v for v in mine if v.check != JUDGED_CHECK]
    real = [v for v in checks if not v.vacuous]
    failed = sum(1 for v in real if not v.passed and not v.inconclusive)
    unsure = sum(1 for v in real if v.inconclusive)
    vacuous = len(checks) - len(real)
    state: State
    if not mine:
        state = "none"
    elif failed:
        state = "fail"
    elif marker is not None or not real:
        state = "not_judged"
    elif unsure:
        state = "inconclusive"
    else:
        state = "pass"
    allowed = state == "not_judged" and marker is not None and marker.vacuous
    return TierState(state, len(real), failed, unsure, vacuous, allowed)
