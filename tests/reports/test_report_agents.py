"""Agents on the wire in the report, the Markdown and the terminal: shown when a tier had tools or sub-agents."""

from __future__ import annotations

from rich.console import Console

from rushhour.audit.summary import AgentFigures, Summary
from rushhour.reports import print_terminal, render_html, render_markdown, sentences

FIGURES = AgentFigures(requests_with_tools=1420, served_with_tools=1380, tool_call_answers=640,
                       tool_calls_by_name={"read_file": 400, "edit_file": 240}, subagent_spawns=12,
                       subagent_requests=39)


def _with_agents(summary: Summary) -> Summary:
    tiers = [summary.tiers[0], summary.tiers[1].model_copy(update={"agents": FIGURES}), *summary.tiers[2:]]
    return summary.model_copy(update={"tiers": tiers})


def test_the_sentence_names_tools_calls_and_spawns(summary: Summary) -> None:
    line = sentences.agents_line(_with_agents(summary).tiers[1])
    assert line == (f"{summary.tiers[1].name}: 1\u202f420 request(s) offered tools (1\u202f380 served); 640 answer(s) "
                    "called a tool (46 % of those served: read_file 400, edit_file 240); 12 call(s) spawned "
                    "sub-agents, which sent 39 request(s).")


def test_shown_everywhere_when_a_run_had_them(summary: Summary) -> None:
    agents = _with_agents(summary)
    html = render_html(agents, None)
    assert 'id="agents-on-the-wire"' in html and 'id="agent-table"' in html and "<code>read_file</code> 400" in html
    assert "### Agents on the wire: tools and sub-agents" in render_markdown(agents)
    console = Console(record=True, width=160)
    print_terminal(agents, console)
    assert "agents on the wire: " + summary.tiers[1].name in console.export_text()


def test_absent_when_a_run_had_none(summary: Summary) -> None:
    assert all(t.agents is None for t in summary.tiers)
    assert 'id="agent-table"' not in render_html(summary, None)
    assert "Agents on the wire" not in render_markdown(summary)
    console = Console(record=True, width=160)
    print_terminal(summary, console)
    assert "agents on the wire" not in console.export_text()
