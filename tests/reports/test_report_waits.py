"""The 'where each tier waited' tables: decode is a column only where whole answers reported it."""

from __future__ import annotations

from rushhour.audit.summary import TierWaits, WaitPart
from rushhour.reports import waits


class _Summary:
    """The two fields the tables read."""

    def __init__(self, *tiers: TierWaits) -> None:
        self.waits = list(tiers)
        self.waits_by_phase: list[TierWaits] = []


def _tier(name: str, decode: int) -> TierWaits:
    def reported(part: str) -> int:
        return decode if part == "decode" else 10

    parts = [WaitPart(part=p, reported=reported(p), not_reported=10 - reported(p), p50_ms=5.0, share=0.2)
             for p in waits.LABELS]
    return TierWaits(tier=name, served=10, total_p50_ms=25.0, total_sum_ms=250.0, parts=parts)


def test_a_streamed_run_has_no_decode_column_and_a_whole_one_has() -> None:
    streamed = _Summary(_tier("interactive", 0), _tier("batch", 0))
    assert "decode" not in waits.header(streamed)  # type: ignore[arg-type]
    assert all(len(row) == len(waits.header(streamed)) for row in waits.rows(streamed))  # type: ignore[arg-type]
    mixed = _Summary(_tier("interactive", 0), _tier("batch", 7))
    head = waits.header(mixed)  # type: ignore[arg-type]
    assert "decode" in head and "gateway queue" in head
    rows = waits.rows(mixed)  # type: ignore[arg-type]
    assert all(len(row) == len(head) for row in rows)
    assert rows[0][head.index("decode")] == "not reported" and rows[1][head.index("decode")] == "5 ms (20 %)"
