"""The run's breaker timeline from several processes' lines: a process following a shared change is not a new one."""

from __future__ import annotations

from rushhour.audit.build import merged_breaker_changes


def row(t: float, state: str, route: str = "primary", cause: str = "") -> dict[str, object]:
    return {"t_s": t, "route": route, "state": state, "previous": None, "cause": cause}


def test_followers_lines_fold_into_the_first_change() -> None:
    rows = [row(3.377, "open", cause="2 consecutive failures"), row(3.384, "open", cause="shared: …"),
            row(3.5, "open", route="standby"), row(6.0, "half_open"), row(7.0, "open", cause="probe_failed"),
            row(12.43, "half_open"), row(12.468, "closed"), row(12.469, "closed", cause="shared: …")]
    merged = merged_breaker_changes(rows)
    assert [(r["t_s"], r["route"], r["state"]) for r in merged] == [
        (3.377, "primary", "open"), (3.5, "standby", "open"), (6.0, "primary", "half_open"),
        (7.0, "primary", "open"), (12.43, "primary", "half_open"), (12.468, "primary", "closed")]


def test_one_process_is_unchanged() -> None:
    rows = [row(1.0, "open"), row(2.0, "half_open"), row(2.1, "closed")]
    assert merged_breaker_changes(rows) == rows
