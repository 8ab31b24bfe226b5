"""Sweep reports: round axis ticks with exact labels, knee statuses in words, the search's section."""

from __future__ import annotations

import re

from rushhour.reports.charts import nice_ticks, tick_label
from rushhour.reports.sweep import knee_words, line_chart, render_sweep_html, render_sweep_markdown, step_words
from rushhour.studies.boundary import SearchResult, SearchSettings, boundary, probe_outcome
from rushhour.studies.knee import analyse_sweep
from tests.studies.test_boundary import step, tier_step


def test_nice_ticks_are_round_and_cover_the_top() -> None:
    assert nice_ticks(3.7) == [0, 1, 2, 3, 4]
    assert nice_ticks(9.5) == [0, 2.5, 5, 7.5, 10]
    assert nice_ticks(0.34) == [0, 0.1, 0.2, 0.3, 0.4]
    assert nice_ticks(62) == [0, 20, 40, 60, 80]
    assert nice_ticks(0) == [0, 1] and nice_ticks(float("nan")) == [0, 1]
    ticks = nice_ticks(9.5)
    assert [tick_label(t, ticks) for t in ticks] == ["0.0", "2.5", "5.0", "7.5", "10.0"]
    assert [tick_label(t, nice_ticks(62)) for t in nice_ticks(62)] == ["0", "20", "40", "60", "80"]


def test_chart_axis_labels_are_the_ticks_exact_values() -> None:
    # before: the x axis was cut in quarters of max × 1.05 and printed as integers ("1" at 0.97)
    svg = str(line_chart([("t", "#000", [(0.5, 1.0), (3.7, 2.2)])], x_label="load", y_label="y"))
    labels = re.findall(r'font-size="10" fill="#5b6474">([^<]+)</text>', svg)
    assert labels == ["0", "1", "2", "3", "0", "1", "2", "3", "4"]
    xs = [float(x) for x in re.findall(r'<text x="([0-9.]+)" y="\d+" text-anchor="middle" font-size="10"', svg)]
    assert xs[-1] == 380 - 12 and xs[0] == 56, "the axis runs from the first tick to the last, exactly"


def test_a_percentage_axis_stops_at_100() -> None:
    svg = str(line_chart([("t", "#000", [(1.0, 0.0), (2.0, 99.0)])], x_label="load", y_label="%", y_top=100.0))
    labels = re.findall(r'text-anchor="end" font-size="10" fill="#5b6474">([^<]+)</text>', svg)
    assert labels == ["0", "25", "50", "75", "100"]


def test_knee_and_step_statuses_read_as_words() -> None:
    assert knee_words("within") == "holds, then fails" and knee_words("always_passes") == "holds at every load"
    assert knee_words("never_passes") == "fails at every load" and knee_words("no_slo") == "no SLO"
    assert step_words("pass", False) == "pass, not confident" and step_words("fail", True) == "fail"


def _search_result() -> SearchResult:
    settings = SearchSettings(low=1.0, high=4.0, precision=0.5)
    steps = [step(0, 1.0, [tier_step("high", "pass", True)]), step(1, 4.0, [tier_step("high", "fail", True, 0.4)]),
             step(2, 2.0, [tier_step("high", "pass", False)], valid=False),
             step(3, 2.0, [tier_step("high", "pass", True)]), step(4, 2.828, [tier_step("high", "fail", True, 0.3)])]
    found = boundary([probe_outcome(s, seed=5) for s in steps], steps, settings)
    swept = analyse_sweep(steps, sweep_id="sweep-x", scenario="s", mode="steady", created_at="now")
    return SearchResult(**dict(swept), search=found)


def test_the_search_section_in_html_and_markdown() -> None:
    result = _search_result()
    assert result.search.pass_scale == 2.0 and result.search.fail_scale == 2.828
    html = render_sweep_html(result)
    assert 'id="search"' in html and "SLO boundary" in html and "pass, confident" in html
    assert "invalid run" in html and "[90 ms, 110 ms]" in html
    assert "within" not in re.sub(r"<[^>]+>", "", html.split('id="knees"')[1]).split("Against offered load")[0]
    md = render_sweep_markdown(result)
    assert "### SLO boundary" in md and "| 3 | 2× | 20.0 | 5 | pass, not confident, invalid run |" in md
    assert "| high | – | holds, then fails |" in md
    dumped = result.model_dump(mode="json", by_alias=True)
    assert dumped["schema"] == "rushhour.sweep/1" and dumped["search"]["pass_scale"] == 2.0
