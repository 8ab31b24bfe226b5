"""A sweep step where a check judged nothing (no saturation yet) says nothing about the knee (issue 34)."""

from __future__ import annotations

from rushhour.audit.gates import vacuous
from rushhour.audit.judged import not_judged_verdict
from rushhour.scenarios.model import SLO
from rushhour.studies.knee import step_from_summary

from .helpers import summary, tier, verdicts_for


def test_vacuous_checks_leave_a_step_unjudged_not_failed() -> None:
    batch = tier("batch", -1, 100, 0, 500.0)
    floor = vacuous("batch", "floor_share", 0.05, "point", "no saturation window")
    marker = not_judged_verdict("batch", [floor], SLO(floor_share=0.05), "point")
    assert marker is not None
    step = step_from_summary(summary([batch], [floor, marker]), 0, 1.0)
    assert step.tier("batch").status == "no_slo"  # not "fail": the floor was not exercised at this load
    judged = step_from_summary(summary([batch], [floor, *verdicts_for(batch, None, 0.1)]), 0, 1.0)
    row = judged.tier("batch")
    assert row.status == "pass" and [c.check for c in row.checks] == ["max_drop_rate"]


def test_a_starved_step_fails() -> None:
    from rushhour.audit.judged import starved_verdict

    batch = tier("batch", -1, 100, 100, None)
    starved = starved_verdict(batch, SLO(floor_share=0.05), "point")
    assert starved is not None
    step = step_from_summary(summary([batch], [starved]), 0, 1.0)
    assert step.tier("batch").status == "fail"
