"""The CLI's consoles: a terminal's width on a terminal; wide, never cut, in a CI log or a pipe.

Rich lays out for 80 columns when its stream is not a terminal, so tables were cut ("interac…") and
paths wrapped in CI logs. Off a terminal the console is ``LOG_WIDTH`` wide (or ``COLUMNS`` when wider)
and prints soft-wrapped: lines are as long as their text, a path stays on one line.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

LOG_WIDTH = 200


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def log_width() -> int:
    """Columns to lay out for off a terminal: ``LOG_WIDTH``, or ``COLUMNS`` when that is wider."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    return max(LOG_WIDTH, columns)


def make_console(*, stderr: bool = False) -> Console:
    """A console for stdout (or stderr): wide and soft-wrapped unless its stream is a terminal."""
    if _is_terminal(sys.stderr if stderr else sys.stdout):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=log_width(), soft_wrap=True)


def widen_help() -> None:
    """Typer's help off a terminal with no ``COLUMNS``: as wide as the piped tables, not Rich's 80 columns."""
    import typer.rich_utils

    if typer.rich_utils.MAX_WIDTH is None and "COLUMNS" not in os.environ and not _is_terminal(sys.stdout):
        typer.rich_utils.MAX_WIDTH = LOG_WIDTH


def print_error(console: Console, message: str) -> None:
    """``error: <message>`` in red; the message is text, never markup (it may quote what the user typed)."""
    from rich.markup import escape

    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
