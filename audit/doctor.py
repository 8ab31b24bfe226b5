"""Judge ``rushhour doctor``'s probes: does rushhour understand this stack? (pure functions)

The probes (``loadgen.engine.doctor``) are ordinary attempt records tagged by persona; each is classified
with the profile's own rules, exactly as a run's audit would. A check *fails* when the audit of a
real run against this stack would be wrong (no answer, streams that never end, a tier the stack
refuses, a priority polarity that runs backwards, an answer no rule recognises); it *warns* when the
audit would be poorer but not wrong (no usage in the stream, unreadable metrics); a trial that saw no
queueing is a note (priority could not act: more fillers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rushhour import stacks
from rushhour.audit import text
from rushhour.audit.classify import classify_one, named_cause
from rushhour.audit.doctor_timing import timing_check
from rushhour.records.doctor import Collected, Plan

Status = Literal["pass", "warn", "fail", "info"]
TEXT_CUT = 90
QUEUEING_FACTOR = 2.0  # a pair whose TTFTs are both within this factor of the idle TTFT never queued
TIE_SHARE = 0.1  # first tokens closer than this share of the shorter wait came in one batch: no order


@dataclass(frozen=True)
class Check:
    """One line of the doctor's screen."""

    name: str
    status: Status
    detail: str


@dataclass
class DoctorInput:
    """Everything the judgement reads: the probes' records and one scrape."""

    profile: str
    target: str
    tiers: Mapping[str, int]  # tier name -> rushhour priority (higher = more urgent)
    records: list[dict[str, Any]]
    metrics_found: list[str] = field(default_factory=list)  # the profile's metric names present at /metrics
    metrics_wanted: list[str] = field(default_factory=list)
    metrics_error: str | None = None
    probe_error: str | None = None  # the probe process failed or overran
    model: str = ""
    models: list[str] = field(default_factory=list)  # what GET /v1/models listed
    models_error: str | None = None
    route_profiles: Mapping[str, str] = field(default_factory=dict)  # fallback route name -> its profile


def outcome(profile: str, rec: Mapping[str, Any]) -> str:
    """The audit class of one probe record under ``profile``."""
    return classify_one(
        profile,
        status=int(rec.get("status") or 0),
        reason=rec.get("reason"),
        error=rec.get("error"),
        in_band_error=rec.get("in_band_error"),
        complete=bool(rec.get("complete")),
        cancelled=bool(rec.get("cancelled")),
        not_sent=bool(rec.get("not_sent")),
        client_timeout=bool(rec.get("client_timeout")),
        transport_error=bool(rec.get("transport_error")),
        first_token=rec.get("first_token_ns") is not None,
    )


def _cut(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= TEXT_CUT else text[: TEXT_CUT - 1] + "…"


def describe(profile: str, rec: Mapping[str, Any]) -> str:
    """``503 "The engine is busy…" → queue_full`` for one record."""
    status = int(rec.get("status") or 0)
    text = rec.get("in_band_error") or rec.get("error") or rec.get("reason")
    where = "in-band " if rec.get("in_band_error") else ""
    head = f"{where}{status}" if status else "no HTTP answer"
    return f'{head} "{_cut(text)}" → {outcome(profile, rec)}' if text else f"{head} → {outcome(profile, rec)}"


def _by_persona(records: Iterable[Mapping[str, Any]], prefix: str) -> list[Mapping[str, Any]]:
    return [r for r in records if str(r.get("persona", "")).startswith(prefix)]


def check_reachable(inp: DoctorInput) -> Check:
    answered = [r for r in inp.records if int(r.get("status") or 0) > 0]
    if inp.records and answered:
        return Check("reachable", "pass", f"{len(answered)} of {len(inp.records)} probes got an HTTP answer")
    why = next((r.get("error") for r in inp.records if r.get("error")), None) or inp.probe_error or "no probe was sent"
    return Check("reachable", "fail", f"no HTTP answer from {inp.target}: {_cut(why)}")


def check_model(inp: DoctorInput) -> Check:
    """The requested model is one the stack lists (a wrong name turns every request into a 404)."""
    if inp.models_error:
        return Check("model", "warn", f"could not list models ({_cut(inp.models_error)}); requesting {inp.model!r}")
    if inp.model in inp.models:
        return Check("model", "pass", f"{inp.model!r} is served")
    listed = ", ".join(inp.models[:5]) or "none"
    fix = f"pass --model {inp.models[0]}" if inp.models else "pass --model NAME"
    return Check("model", "fail", f"model {inp.model!r} is not served (served: {listed}): {fix} "
                 "(or set target.model in the scenario)")


def check_streaming(inp: DoctorInput) -> list[Check]:
    """Per tier: streamed tokens and an end marker; usage reported (prompt and output tokens)."""
    out: list[Check] = []
    probes = _by_persona(inp.records, "doctor-tier")
    served = [r for r in probes if outcome(inp.profile, r) == "served"]
    cut = [
        r
        for r in probes
        if 200 <= int(r.get("status") or 0) < 300 and not r.get("complete") and not r.get("in_band_error")
    ]
    if cut:
        out.append(
            Check(
                "streams end",
                "fail",
                f"{len(cut)} streamed answer(s) never sent the end marker "
                f"({_cut(cut[0].get('error'))}): served requests would read as failed",
            )
        )
    elif served:
        tokens = [int(r.get("tokens") or 0) for r in served]
        out.append(
            Check(
                "streams",
                "pass",
                f"{len(served)} streamed answer(s) ended with the end marker "
                f"({min(tokens)}–{max(tokens)} content events)",
            )
        )
    if served:
        with_usage = [r for r in served if r.get("output_tokens") is not None and r.get("prompt_tokens") is not None]
        if len(with_usage) == len(served):
            out.append(Check("usage", "pass", "the stream reports prompt and output tokens"))
        else:
            out.append(
                Check(
                    "usage",
                    "warn",
                    f"{len(served) - len(with_usage)} of {len(served)} served answers carried "
                    "no usage: token counts fall back to the client's count of stream events",
                )
            )
    return out


def check_tiers(inp: DoctorInput) -> list[Check]:
    """Each tier's small request is accepted (its wire mapping is understood by the stack)."""
    out = []
    probes = {str(r.get("tier")): r for r in _by_persona(inp.records, "doctor-tier")}
    for tier in inp.tiers:
        rec = probes.get(tier)
        if rec is None:
            out.append(Check(f"tier {tier}", "fail", "no probe was sent"))
            continue
        cls = outcome(inp.profile, rec)
        if cls == "served":
            out.append(Check(f"tier {tier}", "pass", f"accepted and served (status {int(rec.get('status') or 0)})"))
        elif 400 <= int(rec.get("status") or 0) < 500 and int(rec.get("status") or 0) not in (408, 429):
            out.append(
                Check(
                    f"tier {tier}",
                    "fail",
                    f"refused: {describe(inp.profile, rec)} — the tier's mapping "
                    f"(profile {inp.profile}) is not accepted by this stack",
                )
            )
        else:
            out.append(Check(f"tier {tier}", "warn", f"not served: {describe(inp.profile, rec)}"))
    return out


def _first_token(rec: Mapping[str, Any] | None) -> float | None:
    if rec is None or rec.get("first_token_ns") is None or rec.get("sent_ns") is None:
        return None
    return float(rec["first_token_ns"])


def _ttft_ms(rec: Mapping[str, Any] | None) -> float | None:
    if rec is None or rec.get("first_token_ns") is None or rec.get("sent_ns") is None:
        return None
    return (float(rec["first_token_ns"]) - float(rec["sent_ns"])) / 1e6


def first_of_pair(high: Mapping[str, Any] | None, low: Mapping[str, Any] | None) -> str | None:
    """'high', 'low' or 'tie' (first tokens closer than ``TIE_SHARE`` of the shorter wait); None if unserved."""
    h, lo = _first_token(high), _first_token(low)
    wait_h, wait_l = _ttft_ms(high), _ttft_ms(low)
    if h is None or lo is None or wait_h is None or wait_l is None:
        return None
    if abs(h - lo) / 1e6 < TIE_SHARE * min(wait_h, wait_l):
        return "tie"  # admitted together (one batch): the engine did not order them
    return "high" if h < lo else "low"


def polarity_verdict(orders: Mapping[str, str | None]) -> str | None:
    """'honoured', 'reversed', 'ignored' or None (undecidable) from which went first in trials a and b.

    Trial ``a`` sent low first, trial ``b`` high first. Each trial tells one thing apart: only priority serves
    the high request first in ``a`` (it was sent second), and only a reversed polarity serves the low one first in
    ``b``; the other trial must not contradict it, and a tie (admitted together: two seats freed at once) does not.
    Honoured: high first in ``a``, high first or a tie in ``b``; reversed: low first in ``b``, low first or a tie in
    ``a``; ignored: send order or ties in both; high first in ``a`` and low first in ``b`` contradict each other.
    """
    a, b = orders.get("a"), orders.get("b")
    if a is None or b is None:
        return None
    if a == "high" and b in ("high", "tie"):
        return "honoured"
    if b == "low" and a in ("low", "tie"):
        return "reversed"
    if a in ("low", "tie") and b in ("high", "tie"):
        return "ignored"
    return None


def check_polarity(inp: DoctorInput) -> Check | None:
    """Which tier went first while the engine was busy: does the mapping's priority polarity hold?

    Only a trial in which the pair queued says anything: without a queue, priority has nothing to reorder.
    Where the server times each request (vLLM's per-request metrics), queued means it says one of the pair
    waited in its engine queue longer than the idle TTFT of the tier probes; elsewhere, a first token later
    than ``QUEUEING_FACTOR`` × that idle TTFT.
    """
    pairs = _by_persona(inp.records, "doctor-polarity-")
    if not pairs:
        return None
    found: dict[str, dict[str, Mapping[str, Any]]] = {}
    for rec in pairs:
        _, _, trial, role = str(rec["persona"]).split("-", 3)
        found.setdefault(trial, {})[role] = rec
    idle = [t for r in _by_persona(inp.records, "doctor-tier") if (t := _ttft_ms(r)) is not None]
    idle_ms = max(min(idle), 1.0) if idle else None
    detail = ", ".join(
        f"trial {t}: high {_fmt(_ttft_ms(found[t].get('high')))} / low {_fmt(_ttft_ms(found[t].get('low')))}"
        for t in sorted(found)
    )

    def queued(trial: str) -> bool:
        pair = list(found.get(trial, {}).values())
        engine = [float(q) for r in pair if (q := r.get("metrics_queue_time_ms")) is not None]
        if idle_ms is not None and len(engine) == len(pair) == 2:
            # the server's own word: a pair served at once beside fillers that ended early can still be late
            # at the client by the front end's share (seen on real vLLM: 16 and 28 ms against 10 ms idle, no
            # seat waited for), and the client's time would call that queueing
            return max(engine) > idle_ms
        waits = [w for r in pair if (w := _ttft_ms(r)) is not None]
        return idle_ms is not None and bool(waits) and max(waits) > QUEUEING_FACTOR * idle_ms

    verdict = polarity_verdict({t: first_of_pair(r.get("high"), r.get("low")) for t, r in found.items()})
    if verdict is None:
        return Check(
            "priority polarity", "warn", f"could not tell (a pair was not served, or the orders disagree): {detail}"
        )
    if not (queued("a") and queued("b")):
        return Check(
            "priority polarity",
            "info",
            f"a trial saw no queueing, so priority could not act ({detail}); raise --fillers to test it",
        )
    if verdict == "honoured":
        return Check(
            "priority polarity", "pass",
            f"the higher tier got its first token first though sent second, and not after the lower one when sent "
            f"first ({detail})"
        )
    if verdict == "reversed":
        return Check(
            "priority polarity",
            "fail",
            f"the LOWER tier went first though sent second ({detail}): the stack reads "
            f"priority the other way round from profile {inp.profile}",
        )
    return Check(
        "priority polarity",
        "warn",
        f"served in send order or together in both trials ({detail}): "
        f"priority had no visible effect (is priority scheduling on?)",
    )


def _fmt(ms: float | None) -> str:
    return "—" if ms is None else text.ms(ms)


def check_tools(inp: DoctorInput) -> list[Check]:
    """Per route, when the personas offer tools: the stack accepts a request carrying them.

    A refusal fails: every agent call of a run would be refused. A rule that names the cause
    (``Rule.finding``, e.g. vLLM started without a tool-call parser) gives the line its fix.
    """
    out: list[Check] = []
    for rec in _by_persona(inp.records, "doctor-tools"):
        route = str(rec.get("route") or "primary")
        profile = inp.route_profiles.get(route, inp.profile)
        name = "tools" if route == "primary" else f"tools ({route})"
        cls = outcome(profile, rec)
        if cls == "served":
            out.append(Check(name, "pass", f"a request offering the personas' tools was served "
                                           f"(status {int(rec.get('status') or 0)})"))
            continue
        cause = named_cause(profile, status=int(rec.get("status") or 0), reason=rec.get("reason"),
                            error=rec.get("error"), in_band_error=rec.get("in_band_error"),
                            first_token=rec.get("first_token_ns") is not None)
        status = int(rec.get("status") or 0)
        if cause:
            out.append(Check(name, "fail", f"{cause} ({status} → {cls})"))
        elif 400 <= status < 500 and status not in (408, 429):
            out.append(Check(name, "fail", f"refused a request offering tools: {describe(profile, rec)}"))
        else:
            out.append(Check(name, "warn", f"a request offering tools was not served: {describe(profile, rec)}"))
    return out


def check_error_shapes(inp: DoctorInput) -> list[Check]:
    """The deliberately bad requests' answers are recognised (never unclassified)."""
    out = []
    for rec in _by_persona(inp.records, "doctor-error-"):
        what = str(rec["persona"]).removeprefix("doctor-error-")
        cls = outcome(inp.profile, rec)
        status: Status = "fail" if cls in ("unclassified", "served") else "pass"
        note = " (the stack accepted an impossible request)" if cls == "served" else ""
        out.append(Check(f"error shape: {what}", status, describe(inp.profile, rec) + note))
    return out


def check_unrecognised(inp: DoctorInput) -> Check:
    """Every answer any probe got is known to the profile's rules."""
    unknown = [r for r in inp.records if outcome(inp.profile, r) == "unclassified"]
    if not unknown:
        return Check("recognised answers", "pass", f"every answer matched a rule of profile {inp.profile}")
    shapes = sorted({describe(inp.profile, r) for r in unknown})
    return Check(
        "recognised answers",
        "fail",
        f"{len(unknown)} answer(s) no rule of profile {inp.profile} knows: " + "; ".join(shapes[:3]),
    )


def check_metrics(inp: DoctorInput) -> Check:
    if inp.metrics_error:
        return Check("metrics", "warn", f"/metrics not readable: {_cut(inp.metrics_error)} — no server cross-check")
    if not inp.metrics_wanted:
        return Check("metrics", "info", f"profile {inp.profile} names no server metrics")
    if not inp.metrics_found:
        return Check(
            "metrics",
            "warn",
            f"none of the profile's metrics ({', '.join(inp.metrics_wanted[:4])}…) "
            "were exposed — no server cross-check",
        )
    return Check(
        "metrics",
        "pass",
        f"{len(inp.metrics_found)} of {len(inp.metrics_wanted)} of the profile's metrics "
        f"readable ({', '.join(inp.metrics_found[:3])}…)",
    )


def judge(inp: DoctorInput) -> list[Check]:
    """Every check, in screen order."""
    reach = check_reachable(inp)
    if reach.status == "fail":
        return [reach, check_metrics(inp)]
    model = check_model(inp)
    if model.status == "fail":
        # every probe asked for a model the stack does not serve: its refusals say nothing of the tiers'
        # mapping, the polarity or the tools, so none of them is blamed; the model is the one thing to fix
        shapes = [c for c in check_error_shapes(inp) if c.name == "error shape: model"]
        return [reach, model, Check("tiers", "info", "not judged: every probe named a model the stack does not "
                                    "serve (fix the model, then run the doctor again)"),
                *shapes, check_unrecognised(inp), check_metrics(inp)]
    checks = [reach, model, *check_streaming(inp), *check_tiers(inp), *check_tools(inp)]
    timing = timing_check(inp.profile, [r for r in _by_persona(inp.records, "doctor-tier")
                                        if outcome(inp.profile, r) == "served"])
    checks += [Check("server timing", *timing)] if timing else []
    polarity = check_polarity(inp)
    if polarity is not None:
        checks.append(polarity)
    checks += [*check_error_shapes(inp), check_unrecognised(inp), check_metrics(inp)]
    if inp.probe_error:
        checks.append(Check("probes", "fail", inp.probe_error))
    return checks


def exit_code(checks: Iterable[Check]) -> int:
    """1 when any check fails (the audit of a run would be wrong), else 0."""
    return 1 if any(c.status == "fail" for c in checks) else 0


def doctor_input(plan: Plan, got: Collected) -> DoctorInput:
    """The judgement's input from what ``loadgen.diagnose`` collected."""
    scenario = got.scenario or plan.scenario
    metrics = stacks.get(plan.profile).metrics
    # the counters the cross-check compares, and the families named one by one
    wanted = {n.removesuffix("_total") for c in metrics.checks for n in c.names} | set(metrics.names)
    return DoctorInput(
        profile=plan.profile,
        target=plan.url,
        tiers={t.name: t.priority for t in scenario.tiers},
        records=got.records,
        metrics_found=sorted(n for n in got.metric_names if n.removesuffix("_total") in wanted),
        metrics_wanted=sorted(wanted),
        metrics_error=got.metrics_error,
        probe_error=got.probe_error,
        model=scenario.target.model,
        models=got.models,
        models_error=got.models_error,
        route_profiles={fb.name: fb.profile for fb in scenario.resilience.fallback},
    )
