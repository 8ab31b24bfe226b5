"""'Where each tier waited': the audit's wait split as table rows and sentences, for every report format."""

from __future__ import annotations

from audit.summary import Summary
from audit.waits import PARTS, sentence

HEADER = ["tier", "served", "wait p50", *[f"{p.replace('_', ' ')} p50 (share)" for p in PARTS]]


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def rows(summary: Summary) -> list[list[str]]:
    """One row per tier: its p50 wait, then each part's p50 and share (— not reported)."""
    out = []
    for waits in summary.waits:
        cells = [waits.tier, str(waits.served), _ms(waits.total_p50_ms)]
        for part in waits.parts:
            if part.reported == 0:
                cells.append("not reported")
            else:
                share = "" if part.share is None else f" ({part.share * 100:.0f} %)"
                cells.append(_ms(part.p50_ms) + share)
        out.append(cells)
    return out


def lines(summary: Summary) -> list[str]:
    """A sentence per tier, from the numbers; the timing checks against the server's totals after them."""
    out = [sentence(w) for w in summary.waits]
    for check in summary.timing_checks:
        verdict = "agrees" if check.matches else "DISAGREES"
        out.append(f"{check.record_field} summed over {check.client_count} requests: {check.client_sum_s:.3f} s; "
                   f"{check.metric}: {check.server_sum_s:.3f} s over {check.server_count:.0f} ({verdict})")
    return out
