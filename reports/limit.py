"""A find-limit run's answer for every report: the sentence, the per-tier limits, the hold, the steps tried (pure).

The answer is run.json's ``find_limit`` as the summary carries it (``RunInfo.find_limit``), a hostile file's
data: every field is read with a default, and a malformed one shows as ``-``, never as a traceback.
"""

from __future__ import annotations

from typing import Any

from rushhour.audit.limit import limit_sentence
from rushhour.audit.summary import Summary

STEPS_HEADER = ["#", "kind", "load ×", "offered /s", "window s", "live", "judged on all", "sent",
                "output tok/s (per user)", "binding check"]
MAX_STEPS = 60  # a report shows this many steps at most (a run's controller tries far fewer)


def found(summary: Summary) -> dict[str, Any] | None:
    """The find-limit answer, when the run was one."""
    value = summary.run.find_limit
    return value if isinstance(value, dict) else None


def _num(value: Any, digits: int = 4) -> str:
    return f"{value:.{digits}g}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def lines(answer: dict[str, Any]) -> list[str]:
    """The answer in sentences: the limit and binding check, each tier's own bracket, the hold."""
    try:
        out = [limit_sentence(answer)]
    except (TypeError, ValueError, AttributeError):
        out = ["find-limit answer unreadable"]
    tiers = answer.get("tiers")
    for name, t in sorted(tiers.items()) if isinstance(tiers, dict) else []:
        if not isinstance(t, dict):
            continue
        if t.get("reached"):
            out.append(f"{name}: sustains {_num(t.get('low_scale'))}× ({_num(t.get('low_rps'))}/s), fails from "
                       f"{_num(t.get('high_scale'))}× ({_num(t.get('high_rps'))}/s)")
        else:
            out.append(f"{name}: never failed; passed up to {_num(t.get('low_scale'))}× ({_num(t.get('low_rps'))}/s)")
    hold = answer.get("hold")
    if isinstance(hold, dict):
        raw = hold.get("check")
        check: dict[str, Any] = raw if isinstance(raw, dict) else {}
        out.append(f"hold at {_num(hold.get('scale'))}×: {hold.get('outcome', '-')}, ended on "
                   f"{hold.get('ended') or '-'}; binding figure {check.get('line', '-')} (95 % half-width "
                   f"{_num(check.get('half_width'), 3)} of it; asked {_num(hold.get('precision'), 3)})")
    unwatched = answer.get("unwatched_tiers")
    if isinstance(unwatched, list) and unwatched:
        out.append(f"not watched (no drop-rate, TTFT or end-to-end SLO): {', '.join(map(str, unwatched))}")
    return out


def _tokens(tiers: Any) -> str:
    """Each tier's output tokens/s at a step, and per user in brackets: ``gold 812 (41)``."""
    if not isinstance(tiers, dict):
        return "-"
    parts = [f"{name} {_num(t.get('output_tokens_per_s'), 4)} ({_num(t.get('tokens_per_s_per_user'), 3)})"
             for name, t in sorted(tiers.items()) if isinstance(t, dict) and t.get("output_tokens_per_s") is not None]
    return ", ".join(parts) or "-"


def step_rows(answer: dict[str, Any]) -> list[list[str]]:
    """One row per level tried: the ramp, the bisection and the hold."""
    rows = []
    steps = answer.get("steps")
    for s in steps[:MAX_STEPS] if isinstance(steps, list) else []:
        if not isinstance(s, dict):
            continue
        raw = s.get("window_s")
        window: list[Any] = raw if isinstance(raw, list) else []
        span = "–".join(_num(w, 5) for w in window[:2])
        live = str(s.get("live") or "-")
        # how the live decision came: a sure failure before the window's end, a pass the next level started on
        # (borne out or not on all its requests), a level started on a pass that was not borne out
        how = ("early" if s.get("early") is True else "ahead" if s.get("ahead") is True else
               "ahead, not borne out" if s.get("ahead") is False else "abandoned" if s.get("abandoned") is True else "")
        live += f" ({how})" if how else ""
        judged = str(s.get("outcome") or "-") + ("" if s.get("agrees", True) else " (differs)")
        rows.append([str(s.get("index", "-")), str(s.get("kind", "-")), _num(s.get("scale")),
                     _num(s.get("offered_rps")), span, live, judged, str(s.get("sent", "-")), _tokens(s.get("tiers")),
                     str(s.get("reason") or "-")[:200]])
    return rows
