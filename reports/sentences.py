"""Plain sentences generated from the numbers, for people who read no tables."""

from __future__ import annotations

from rushhour.audit.judged import JUDGED_CHECK, tier_state
from rushhour.audit.summary import POLICY_DROP_CLASSES, UNSERVED_CLASSES, Summary, TaskStats, TierSummary
from rushhour.reports import fmt

# How each unserved class reads in a sentence (policy classes first, as in the breakdown).
_DROP_WORDS = {
    "queue_full": "queue full",
    "queue_timeout": "timed out in the queue",
    "shed": "shed",
    "preempted": "preempted after admission",
    "overloaded": "refused as overloaded",
    "rate_limited": "rate limited",
    "failed": "failed",
    "timeout": "client timeout",
    "transport": "no HTTP answer",
    "cancelled": "cancelled by the server",
    "abandoned": "abandoned by the user",
    "unfinished": "unfinished at run end",
    "unclassified": "unclassified",
}
_BREAKDOWN_ORDER = (*POLICY_DROP_CLASSES, *(c for c in UNSERVED_CLASSES if c not in POLICY_DROP_CLASSES))


def interrupted_text(summary: Summary) -> str:
    """'the run was interrupted (stop reason: budget)', or empty when it ended on schedule."""
    if not summary.run.interrupted:
        return ""
    abort = summary.run.abort
    if abort:
        at = abort.get("at_s")
        when = f" at {fmt.secs(float(at))}" if isinstance(at, int | float) else ""
        return f"the run was aborted early{when} (stop reason: {summary.run.stop_reason}): {abort.get('message', '')}"
    return f"the run was interrupted (stop reason: {summary.run.stop_reason or 'unknown'})"


def _not_judged(summary: Summary) -> tuple[list[str], list[str]]:
    """Tiers whose every check was vacuous: (those that block the gate, those the SLO allows)."""
    names = [t.name for t in summary.tiers]
    names += sorted({v.tier for v in summary.verdicts} - set(names))
    states = [(name, tier_state(summary.verdicts, name)) for name in names]
    blocking = [name for name, st in states if st.state == "not_judged" and not st.allowed]
    return blocking, [name for name, st in states if st.state == "not_judged" and st.allowed]


def preset_line(summary: Summary) -> str:
    """What a simulated run's replicas rest on: a calibrated preset (fitted to which engine, how well), or the
    built-in numbers, said as such; "" for a real run."""
    run = summary.run
    if run.mode != "simulated":
        return ""
    cal = run.calibration
    if not cal:
        return ("The replicas ran on a built-in preset: datasheet-derived and assumed step times, not calibrated "
                "against a real engine (`rushhour calibrate`).")
    if not cal.get("calibrated"):
        return f"The replicas ran on the preset file {cal.get('file')}, which holds no calibration."
    r = cal.get("pearson_r")
    return (f"The replicas ran on the calibrated preset {cal.get('name')} ({cal.get('file')}, sha256 "
            f"{str(cal.get('sha256', ''))[:12]}), fitted to {cal.get('engine')} at {cal.get('server')} on "
            f"{cal.get('date')}: held-out requests predicted {float(cal.get('mape') or 0):.1%} off on average "
            f"(MAPE, {cal.get('heldout')} requests){'' if r is None else f', Pearson r {float(r):.3f}'}"
            f"{_drift(cal.get('speed_drift'))}.")


def _drift(drift: object) -> str:
    """The host's drift within the calibration, as a clause (the engine's speed moving is error no fit removes)."""
    if not isinstance(drift, int | float):
        return ""
    return (f"; the engine ran {fmt.speed_change(drift)} at the calibration's end than at its start (the host's "
            "drift: a prediction is off by about as much again)")


def gate_word(summary: Summary) -> str:
    """The run's badge: PASS, FAIL, INCONCLUSIVE, NOT JUDGED (a tier's checks all vacuous), NO SLOs or INVALID."""
    if not summary.validity.valid:
        return "INVALID"
    if summary.passed:
        return "PASS"
    if not summary.verdicts:
        return "NO SLOs"
    if summary.exit_code != 2:
        return "FAIL"
    unsure = [v for v in summary.verdicts if v.inconclusive and v.check != JUDGED_CHECK]
    return "INCONCLUSIVE" if unsure or not any(_not_judged(summary)) else "NOT JUDGED"


def verdict_line(summary: Summary) -> str:
    """One line: pass, fail, inconclusive, not judged or invalid, which checks failed or judged nothing, and
    whether the run was cut short. Vacuous checks are counted apart: they are neither passed nor failed."""
    checks = [v for v in summary.verdicts if v.check != JUDGED_CHECK]
    real = [v for v in checks if not v.vacuous]
    vacuous = [v for v in checks if v.vacuous]
    total = len(real)
    failed = [v for v in real if not v.passed and not v.inconclusive]
    unsure = [v for v in real if v.inconclusive]
    blocking, allowed = _not_judged(summary)
    cut = interrupted_text(summary)
    tail = f"; {cut}." if cut else "."
    blocked = f"; NOT JUDGED (every check vacuous): {', '.join(blocking)}" if blocking else ""
    rest = f"; NOT JUDGED, allowed by allow_not_judged: {', '.join(allowed)}" if allowed else ""
    if vacuous:
        rest += (f"; {len(vacuous)} vacuous check(s) judged nothing ("
                 + ", ".join(f"{v.tier} {v.check}" for v in vacuous) + ")")
    notes = blocked + rest
    if not summary.validity.valid:
        head = "INVALID RUN: the numbers below cannot be trusted"
        why = "; ".join(summary.validity.reasons) or "see run validity"
        return f"{head} ({why}){tail}"
    if failed:
        names = ", ".join(f"{v.tier} {v.check}" for v in failed)
        text = f"FAIL: {len(failed)} of {total} SLO checks failed ({names})"
        if unsure:
            text += f", {len(unsure)} inconclusive"
        return text + notes + tail
    if unsure:
        names = ", ".join(f"{v.tier} {v.check}" for v in unsure)
        return f"INCONCLUSIVE: {len(unsure)} of {total} SLO checks could not be judged ({names}){notes}{tail}"
    if blocking:
        return (f"NOT JUDGED: every SLO check of {', '.join(blocking)} was vacuous (a check that judges nothing "
                f"is no pass); {total} other check(s) passed{rest}{tail}")
    if not total and not vacuous:
        return ("NOT JUDGED: no SLO checks were configured (add `slo:` to a tier; a gate without checks "
                "cannot fail)" + tail)
    if not total:
        return f"NOT JUDGED: no SLO check judged anything{notes}{tail}"
    return f"PASS: all {total} SLO checks passed{notes}{tail}"


def _windows_text(summary: Summary) -> str:
    """The windows as UTC spans with run-relative times, or a count when there are many."""
    windows = summary.windows
    if len(windows) <= 3:
        return ", ".join(fmt.span_t(summary, w.start_s, w.end_s) for w in windows)
    return f"{len(windows)} windows, the first at {fmt.clock_t(summary, windows[0].start_s)}"


def outage_line(summary: Summary) -> str:
    """The scheduled outages, named apart from saturation (empty when there were none)."""
    if not summary.outages:
        return ""
    parts = [f"the {o.route} route was down for {fmt.secs(o.end_s - o.start_s)}, "
             f"{fmt.span_t(summary, o.start_s, o.end_s)} — {o.detail}" for o in summary.outages]
    return ("Scheduled outage" + ("s" if len(parts) > 1 else "") + ": " + "; ".join(parts)
            + ". An outage is not saturation: these spans are left out of the saturation windows.")


def saturation_line(summary: Summary) -> str:
    """How long the stack was saturated."""
    if not summary.windows:
        outside = " outside the scheduled outages" if summary.outages else ""
        return f"No saturation was detected{outside}: no tier was held back by the stack's capacity."
    total = sum(w.end_s - w.start_s for w in summary.windows)
    tl = summary.timeline
    length = max(summary.run.duration_s, (tl.t[-1] + tl.bucket_s) if tl.t else 0.0)
    share = min(1.0, total / length) if length else None
    return (
        f"The stack was saturated for {fmt.secs(total)}"
        + (f" ({fmt.pct(share)} of the run)" if share is not None else "")
        + f": {_windows_text(summary)}."
    )


def _breakdown(by_class: dict[str, int], n: int, statuses: dict[str, dict[str, int]] | None = None) -> str:
    """'41 % queue full 429, 11 % unfinished at run end': every unserved class with its wire status, policy first."""
    parts = []
    for cls in _BREAKDOWN_ORDER:
        k = by_class.get(cls, 0)
        if k and n:
            seen = sorted((statuses or {}).get(cls, {}).items(), key=lambda kv: -kv[1])
            # error statuses only: a 200 (a stream cut, or unfinished) or 0 (no answer) names nothing
            codes = "/".join(code for code, _ in seen if code.isdigit() and int(code) >= 300)
            words = _DROP_WORDS.get(cls, cls)
            if codes:
                words = f"{words} {codes}"
            parts.append(f"{fmt.pct(k / n)} {words}")
    return ", ".join(parts)


def _not_counted(by_class: dict[str, int]) -> str:
    """' (2 not sent by the generator: not counted)', or empty: what the rates leave out."""
    not_sent = by_class.get("not_sent", 0)
    return f" ({fmt.count(not_sent)} not sent by the generator: not counted)" if not_sent else ""


def tier_line(summary: Summary, tier: TierSummary) -> str:
    """The tier's story in one or two sentences: how long it waited and how much was not served."""
    if tier.requests == 0:
        return f"{tier.name} sent no requests, so nothing can be said about it."
    sat = tier.saturation
    if sat is not None and sat.requests and summary.windows:
        when = f"During saturation {tier.name}"
        n, by_class, ttft = sat.drop_rate.n, sat.by_class, sat.ttft_ms
    else:
        when = f"Over the run {tier.name}"
        n, by_class, ttft = tier.drop_rate.n, tier.by_class, tier.latency.ttft_ms
    p99 = ttft.p99
    # percentages are of sent requests (the drop rate's denominator), as in the tables
    unserved = fmt.unserved_count(by_class)
    wait = f"waited p99 {fmt.pctl_text(ttft, 'p99')}" if p99 is not None else "had no served request to time"
    if not n:
        text = f"{when} sent nothing"
    elif unserved == 0:
        text = f"{when} {wait} and was never dropped"  # said only when every sent request was served
    else:
        text = (f"{when} {wait}; {fmt.pct(unserved / n)} not served "
                f"({_breakdown(by_class, n, tier.status_by_class)})")
    text += _not_counted(by_class) + "."
    # status 0 = nothing received: not a response (the tables list it)
    statuses = [f"{fmt.count(v)} × {k}" for k, v in sorted(tier.by_status.items()) if k not in ("200", "0") and v]
    if statuses:
        text += f" Raw non-200 responses: {', '.join(statuses)}."
    return text


def whole_run_line(tier: TierSummary) -> str:
    """Whole-run totals: served, not served with interval and its policy part, TTFT p50/p99 and inflation."""
    if tier.requests == 0:
        return f"{tier.name}: no requests."
    served = tier.by_class.get("served", 0)
    judged = tier.drop_rate.n  # the rates' denominator: every request sent (not_sent left out)
    lat = tier.latency
    text = (
        f"{tier.name}: {fmt.count(tier.requests)} requests{_not_counted(tier.by_class)}, "
        f"{fmt.pct(served / judged if judged else None)} served, "
        f"{fmt.rate_ci(tier.drop_rate)} not served ({fmt.pct(tier.policy_drop_rate.value)} turned away by policy); "
        f"TTFT p50 {fmt.pctl_text(lat.ttft_ms, 'p50')}, p99 {fmt.pctl_text(lat.ttft_ms, 'p99')}"
    )
    if lat.ttft_from_intended_ms.p99 is not None:
        text += f" ({fmt.pctl_text(lat.ttft_from_intended_ms, 'p99')} from the intended send)"
    if tier.inflation.p99_x is not None:
        text += f", {fmt.times(tier.inflation.p99_x)} an idle stack at p99"
    return text + "."


def never_dropped(summary: Summary) -> str:
    """'interactive was never dropped' across tiers whose every sent request was served, or empty."""
    names = [t.name for t in summary.tiers
             if t.drop_rate.n and t.unserved == 0 and fmt.unserved_count(t.by_class) == 0]
    if not names:
        return ""
    verb = "was" if len(names) == 1 else "were"
    return f"{' and '.join(names)} {verb} never dropped."


def task_line(tier: TierSummary, stats: TaskStats, what: str) -> str:
    """'batch agent tasks: 150 of 210 completed (71 %), 42 missed their deadline; makespan p50 38 s'."""
    if stats.n == 0:
        return f"{tier.name} had no {what}."
    ended = stats.n - stats.cancelled  # the rate leaves out those still running when the run stopped
    text = (
        f"{tier.name} {what}: {fmt.count(stats.completed)} of {fmt.count(ended)} completed "
        f"({fmt.pct(stats.completion_rate.value)})"
    )
    if stats.cancelled:
        text += f" ({fmt.count(stats.cancelled)} more still running at the end, not counted)"
    if stats.deadline_missed:
        text += f", {fmt.count(stats.deadline_missed)} missed their deadline"
    if stats.failed:
        text += f", {fmt.count(stats.failed)} failed"
    if stats.makespan_s.p50 is not None:
        text += f"; makespan p50 {fmt.secs(stats.makespan_s.p50)}, p99 {fmt.secs(stats.makespan_s.p99)}"
    if stats.makespan_inflation_p50_x is not None:
        text += f" ({fmt.times(stats.makespan_inflation_p50_x)} idle at p50)"
    return text + "."


def agents_line(tier: TierSummary) -> str:
    """'batch: 142 requests offered tools (138 served); 64 answers called a tool (46 % of those served: …);
    12 calls spawned sub-agents, which sent 39 requests.', or empty when the tier had neither."""
    a = tier.agents
    if a is None:
        return ""
    parts = []
    if a.requests_with_tools:
        parts.append(f"{fmt.count(a.requests_with_tools)} request(s) offered tools "
                     f"({fmt.count(a.served_with_tools)} served)")
        called = f"{fmt.count(a.tool_call_answers)} answer(s) called a tool"
        if a.served_with_tools:
            called += f" ({fmt.pct(a.tool_call_answers / a.served_with_tools)} of those served"
            names = sorted(a.tool_calls_by_name.items(), key=lambda kv: (-kv[1], kv[0]))
            called += (": " + ", ".join(f"{name} {fmt.count(n)}" for name, n in names) + ")") if names else ")"
        parts.append(called)
    if a.subagent_spawns or a.subagent_requests:
        parts.append(f"{fmt.count(a.subagent_spawns)} call(s) spawned sub-agents, which sent "
                     f"{fmt.count(a.subagent_requests)} request(s)")
    return f"{tier.name}: " + "; ".join(parts) + "." if parts else ""


def agents_lines(summary: Summary) -> list[str]:
    """One line per tier that offered tools or spawned sub-agents (none: an empty list)."""
    return [line for line in (agents_line(t) for t in summary.tiers) if line]


def fairness_line(tier: TierSummary) -> str:
    """Jain index, starvation gap and floor check of a tier, in words."""
    parts = []
    jain = tier.fairness.jain_index
    n = len(tier.fairness.tenants)
    if n <= 1:  # a Jain index over one tenant is 1 by definition: it says nothing about fairness
        parts.append(f"{n} tenant, so fairness across tenants does not apply")
    elif jain is not None:
        quality = "fair" if jain >= 0.95 else ("somewhat uneven" if jain >= 0.8 else "unfair")
        parts.append(f"Jain index {jain:.3f} across {n} tenants ({quality})")
    if tier.starvation_max_gap_s is not None:
        parts.append(f"longest gap without a served request {fmt.secs(tier.starvation_max_gap_s)}")
    floor = tier.floor
    if floor.minimum is not None:
        if floor.passed is None:
            parts.append(f"floor not judged (no saturation): minimum {fmt.pct(floor.minimum)}")
        else:
            state = "held" if floor.passed else "NOT held"
            parts.append(
                f"floor {state}: {fmt.pct(floor.share)} of goodput during saturation "
                f"against a minimum of {fmt.pct(floor.minimum)}"
            )
    return f"{tier.name}: " + ("; ".join(parts) if parts else "no fairness data") + "."


def headline(summary: Summary) -> list[str]:
    """The few sentences a manager reads first."""
    lines = [verdict_line(summary), *unclassified_lines(summary), *filter(None, [outage_line(summary)]),
             saturation_line(summary),
             unfinished_line(summary)]
    lines += [tier_line(summary, t) for t in summary.tiers]
    return [line for line in lines if line]


def unclassified_lines(summary: Summary) -> list[str]:
    """Each ``unclassified`` finding as a sentence: answers no rule knows are named, never hidden."""
    return [f"{f.tier + ': ' if f.tier else ''}{f.message}" for f in summary.findings if f.kind == "unclassified"]


def unfinished_line(summary: Summary) -> str:
    """'7 requests were still unfinished when the run ended (drain 10 s): …', or empty."""
    parts = [f"{fmt.count(t.by_class.get('unfinished', 0))} of {t.name}" for t in summary.tiers
             if t.by_class.get("unfinished", 0)]
    if not parts:
        return ""
    total = sum(t.by_class.get("unfinished", 0) for t in summary.tiers)
    drain = f" (drain {fmt.secs(summary.run.drain_s)} after the last phase)" if summary.run.drain_s is not None else ""
    return (f"{fmt.count(total)} request(s) were still unfinished when the run ended{drain}: "
            f"{', '.join(parts)}; they count as not served.")
