"""Pooled ITL's reading of one record's token times: increasing integers only, bounded, else left out."""

from __future__ import annotations

from rushhour.audit.itl import MAX_TOKENS, gaps_ms


def test_gaps_of_a_record_and_what_is_left_out() -> None:
    assert gaps_ms([0, 1_000_000, 1_000_000, 4_000_000]).tolist() == [1.0, 0.0, 3.0]  # one read: a gap of 0
    for bad in (None, [5], "12", [0, "1"], [0, True], [3, 2], [0, 1.5]):
        assert gaps_ms(bad) is None, bad
    assert len(gaps_ms(list(range(MAX_TOKENS + 10)))) == MAX_TOKENS - 1  # a hostile list read only so far
