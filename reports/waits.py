"""'Where each tier waited': the audit's wait split as table rows and sentences, for every report format."""

from __future__ import annotations

from rushhour.audit.summary import Summary
from rushhour.audit.waits import sentence
from rushhour.reports import fmt

LABELS = {"client": "client", "gateway": "gateway queue", "engine_queue": "engine queue", "prefill": "prefill",
          "decode": "decode", "rest": "rest"}
ONLY_WHEN_SEEN = ("decode",)  # a part of whole answers only: a streamed run's table leaves its column out
CAPTION = "each part: its p50, and (its share of the tier's whole wait); not reported: the stack did not say"


def parts_shown(summary: Summary) -> list[str]:
    """The parts the tables show: every part, less those only whole answers have when none had them."""
    seen = {p.part for w in (*summary.waits, *summary.waits_by_phase) for p in w.parts if p.reported}
    return [part for part in LABELS if part not in ONLY_WHEN_SEEN or part in seen]


def header(summary: Summary, by_phase: bool = False) -> list[str]:
    """The table's header (``by_phase``: the phase first)."""
    return [*(["phase"] if by_phase else []), "tier", "served", "wait p50",
            *(LABELS[p] for p in parts_shown(summary))]


def rows(summary: Summary, by_phase: bool = False) -> list[list[str]]:
    """One row per tier (``by_phase``: per phase and tier, the phase first): its p50 wait, then each part's p50 and
    share (not reported: the stack did not say)."""
    out = []
    shown = set(parts_shown(summary))
    for waits in summary.waits_by_phase if by_phase else summary.waits:
        cells = ([waits.phase or ""] if by_phase else []) + [waits.tier, str(waits.served), fmt.ms(waits.total_p50_ms)]
        for part in (p for p in waits.parts if p.part in shown):
            if part.reported == 0:
                cells.append("not reported")
            else:
                share = "" if part.share is None else f" ({fmt.pct(part.share, 0)})"
                cells.append(fmt.ms(part.p50_ms) + share)
        out.append(cells)
    return out


COLOURS = {"client": "#999999", "gateway": "#E69F00", "engine_queue": "#D62728", "prefill": "#0072B2",
           "decode": "#56B4E9", "rest": "#CCCCCC"}


def bars(summary: Summary) -> list[dict[str, object]]:
    """Per tier, its parts' shares of the wait as stacked-bar segments (percent of the bar; parts not reported
    take no room), the bar's length scaled to the tier's p50 wait against the longest one's."""
    longest = max((w.total_p50_ms or 0.0 for w in summary.waits), default=0.0)
    out: list[dict[str, object]] = []
    for waits in summary.waits:
        segments = [{"part": p.part.replace("_", " "), "colour": COLOURS[p.part], "pct": round(p.share * 100, 1)}
                    for p in waits.parts if p.share is not None and p.share > 0]
        length = 100.0 * (waits.total_p50_ms or 0.0) / longest if longest > 0 else 0.0
        out.append({"tier": waits.tier, "width": round(max(length, 2.0), 1), "segments": segments,
                    "label": fmt.ms(waits.total_p50_ms)})
    return out


def lines(summary: Summary) -> list[str]:
    """A sentence per tier, from the numbers; the timing checks against the server's totals after them."""
    return [sentence(w) for w in summary.waits] + check_lines(summary)


def check_lines(summary: Summary) -> list[str]:
    """One line per timing check: the run's per-request sum against the server's histogram."""
    out = []
    for check in summary.timing_checks:
        verdict = "agrees" if check.matches else "DISAGREES"
        out.append(f"{check.record_field} summed over {check.client_count} requests: "
                   f"{fmt.ms(check.client_sum_s * 1000)}; {check.metric}: {fmt.ms(check.server_sum_s * 1000)} "
                   f"over {fmt.count(check.server_count)} ({verdict})")
    return out
