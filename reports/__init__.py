"""rushhour: reports — summary.json to HTML, Markdown, JUnit XML, BR0.2 and rich terminal tables."""

from __future__ import annotations

from rushhour.reports.html import render_html
from rushhour.reports.junit import render_junit
from rushhour.reports.markdown import render_markdown
from rushhour.reports.terminal import print_terminal, print_verdicts
from rushhour.reports.write import write_br02, write_reports

__all__ = ["print_terminal", "print_verdicts", "render_html", "render_junit", "render_markdown", "write_br02",
           "write_reports"]
