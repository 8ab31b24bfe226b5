"""Markdown and JUnit goldens, the JUnit XSD, sentences and the rich terminal tables."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from rich.console import Console

from rushhour.audit.summary import Finding, Summary
from rushhour.reports import print_terminal, print_verdicts, render_junit, render_markdown, sentences

GOLDEN = Path(__file__).parent / "golden"
XSD = Path(__file__).parent / "junit.xsd"
UPDATE = os.environ.get("RUSHHOUR_UPDATE_GOLDEN") == "1"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"golden {name} did not exist; written — review it and rerun")
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; RUSHHOUR_UPDATE_GOLDEN=1 to accept"


@pytest.mark.parametrize("which", ["summary", "edge"])
def test_markdown_golden(which: str, request: pytest.FixtureRequest) -> None:
    check_golden(f"{which}.md", render_markdown(request.getfixturevalue(which)))


@pytest.mark.parametrize("which", ["summary", "edge"])
def test_junit_golden_and_schema(which: str, request: pytest.FixtureRequest) -> None:
    text = render_junit(request.getfixturevalue(which))
    check_golden(f"{which}.junit.xml", text)
    xmlschema.XMLSchema(str(XSD)).validate(text)


def test_junit_structure(summary: Summary) -> None:
    root = ET.fromstring(render_junit(summary))
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["rushhour.interactive", "rushhour.standard", "rushhour.batch"]
    assert root.get("tests") == "6" and root.get("failures") == "2" and root.get("errors") == "0"
    batch = suites["rushhour.batch"]
    failure = batch.find("testcase[@name='floor_share']/failure")
    assert failure is not None and "floor is 10 %" in (failure.get("message") or "")
    assert suites["rushhour.interactive"].get("failures") == "0"


def test_junit_invalid_run_is_an_error(edge: Summary) -> None:
    root = ET.fromstring(render_junit(edge))
    error = root.find("testsuite[@name='rushhour.run']/testcase[@name='validity']/error")
    assert error is not None and error.get("type") == "invalid_run"
    assert "loop lag" in (error.text or "")
    assert root.get("errors") == "1"
    idle = root.find("testsuite[@name='rushhour.idle']")
    assert idle is not None and idle.get("failures") == "1"


def test_junit_survives_control_characters(summary: Summary) -> None:
    bad = summary.verdicts[3].model_copy(update={"message": "bad \x00\x1b[31m <&> ]]>"})
    text = render_junit(summary.model_copy(update={"verdicts": [bad]}))
    xmlschema.XMLSchema(str(XSD)).validate(text)
    assert "<&>" not in text


def test_markdown_escapes_hostile_text(summary: Summary) -> None:
    hostile = Finding(kind="crosscheck", severity="error", tier="batch", message="<script>x</script> | col")
    text = render_markdown(summary.model_copy(update={"findings": [hostile]}))
    assert "<script>" not in text and "&lt;script&gt;" in text


def test_sentences(summary: Summary, edge: Summary) -> None:
    batch = sentences.tier_line(summary, summary.tier("batch"))
    assert batch.startswith(
        "During saturation batch waited p99 48.0 s; 71 % not served "
        "(62 % queue full, 9.1 % timed out in the queue)."
    )
    assert "720 × 429, 24 × 503" in batch
    assert "never dropped" in sentences.tier_line(summary, summary.tier("interactive"))
    # wall clock and run-relative time side by side
    assert sentences.saturation_line(summary).endswith("12:00:25–12:01:00 UTC (t = 25–60 s).")
    assert sentences.tier_line(edge, edge.tier("idle")) == "idle sent no requests, so nothing can be said about it."
    assert sentences.verdict_line(edge).startswith("INVALID RUN")
    assert "floor NOT held: 6.0 %" in sentences.fairness_line(summary.tier("batch"))


def test_terminal_summary(summary: Summary) -> None:
    console = Console(record=True, width=170, color_system=None)
    print_terminal(summary, console)
    text = console.export_text()
    assert "FAIL: 2 of 6 SLO checks failed" in text
    for expected in ("interactive", "1\u202f200", "744 (31 %)", "720", "48.0 s", "FAIL 1/2", "PASS"):
        assert expected in text


def test_terminal_tolerates_markup_in_text(summary: Summary, edge: Summary) -> None:
    hostile = Finding(kind="x[/]", severity="warning", tier=None, message="[bold red]boom[/] [link=x]")
    console = Console(record=True, width=170, color_system=None)
    print_terminal(summary.model_copy(update={"findings": [hostile]}), console)
    assert "[bold red]boom[/]" in console.export_text()
    print_terminal(edge, console)
    print_verdicts(edge, console)
    assert "invalid: generator loop lag" in console.export_text()


def test_breakdown_names_the_wire_status() -> None:
    from rushhour.reports.sentences import _breakdown

    statuses = {"queue_full": {"429": 27}, "queue_timeout": {"503": 3, "429": 1}}
    text = _breakdown({"queue_full": 27, "queue_timeout": 4}, 100, statuses)
    assert text == "27 % queue full 429, 4.0 % timed out in the queue 503/429"


def test_never_dropped_only_when_everything_was_served(summary: Summary) -> None:
    """Issue 12: 'interactive … was never dropped' was said while 72 of 73 requests failed."""
    inter = summary.tier("interactive")
    by_class = {**inter.by_class, "served": inter.by_class["served"] - 3, "transport": 2, "unfinished": 1}
    broken = inter.model_copy(update={"by_class": by_class, "unserved": 3, "saturation": None})
    s = summary.model_copy(update={"tiers": [broken], "windows": []})
    line = sentences.tier_line(s, broken)
    assert "never dropped" not in line and sentences.never_dropped(s) == ""
    assert "not served" in line and "no HTTP answer" in line and "unfinished at run end" in line


def test_gate_output_names_interruption_and_unclassified(summary: Summary) -> None:
    from rushhour.audit.summary import Finding

    run = summary.run.model_copy(update={"stop_reason": "interrupted", "interrupted": True})
    f = Finding(kind="unclassified", severity="error", tier="batch", message='3 × 529 "x": no rule for profile llm-d')
    s = summary.model_copy(update={"run": run, "findings": [f]})
    console = Console(record=True, width=200, color_system=None)
    print_verdicts(s, console)
    text = console.export_text()
    assert "The run was interrupted (stop reason: interrupted)" in text
    assert 'unclassified: batch: 3 × 529 "x": no rule for profile llm-d' in text
    md = render_markdown(s)
    assert "the run was interrupted (stop reason: interrupted)" in md and "no rule for profile llm-d" in md


def test_junit_marks_inconclusive(summary: Summary) -> None:
    v = summary.verdicts[0].model_copy(update={"passed": False, "inconclusive": True})
    text = render_junit(summary.model_copy(update={"verdicts": [v]}))
    assert 'type="inconclusive"' in text


def test_one_tenant_gets_no_fairness_verdict(summary: Summary) -> None:
    """A Jain index over one tenant is 1 by definition; the demo said "1.000 across 1 tenants (fair)"."""
    tier = summary.tier("batch")
    one = tier.model_copy(update={"fairness": tier.fairness.model_copy(
        update={"jain_index": 1.0, "tenants": tier.fairness.tenants[:1]})})
    line = sentences.fairness_line(one)
    assert "1 tenant, so fairness across tenants does not apply" in line and "Jain" not in line
