"""The whole run's wall time, said before it starts (loadgen/walltime.py)."""

from __future__ import annotations

from rushhour.loadgen.ship import ANCHOR_LEAD_S, LOCAL_ANCHOR_LEAD_S
from rushhour.loadgen.walltime import CALIBRATION_START_S, LOCUST_START_S, PROBE_S, REPORT_S, TESTBED_START_S, wall_time
from rushhour.scenarios import load_scenario


def test_ci_smoke_is_more_than_its_30_s_of_load() -> None:
    scenario = load_scenario("ci-smoke")
    planned = wall_time(scenario)
    assert planned.load_s == 30 and planned.drain_s == 5 and planned.probes == 6
    assert planned.calibration_s == CALIBRATION_START_S + 6 * PROBE_S
    start = TESTBED_START_S + LOCUST_START_S + LOCAL_ANCHOR_LEAD_S  # one local process: the short lead
    assert planned.total_s == start + planned.calibration_s + 30 + 5 + REPORT_S
    line = planned.line()
    assert line.startswith(f"this run takes about {planned.total_s:.0f} s: ") and "6 calibration probes" in line
    assert "load 30 s" in line and "drain up to 5 s" in line


def test_no_probes_no_testbed() -> None:
    scenario = load_scenario("ci-smoke")
    target = scenario.target.model_copy(update={"url": "http://127.0.0.1:8000"})
    calibration = scenario.calibration.model_copy(update={"probes": 0})
    planned = wall_time(scenario.model_copy(update={"target": target, "calibration": calibration}))
    assert planned.probes == 0 and planned.calibration_s == 0 and "calibration" not in planned.line()
    assert planned.start_s == LOCUST_START_S + LOCAL_ANCHOR_LEAD_S


def test_processes_that_hear_the_spawn_message_take_the_full_lead() -> None:
    scenario = load_scenario("ci-smoke")
    alone = wall_time(scenario).start_s
    assert wall_time(scenario, processes=4).start_s == alone - LOCAL_ANCHOR_LEAD_S + ANCHOR_LEAD_S
    assert wall_time(scenario, processes=1, remote_workers=True).start_s == alone - LOCAL_ANCHOR_LEAD_S + ANCHOR_LEAD_S
