"""``rushhour doctor``'s one screen: a line per check, coloured by status."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rushhour.audit.doctor import Check

_STYLE = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red", "info": "dim"}


def print_doctor(checks: Sequence[Check], console: Console, *, target: str, profile: str, folder: str) -> None:
    """The checks as one table, then the verdict and where the probes' records are."""
    table = Table(
        title=f"rushhour doctor · {target} · profile {profile}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_header=False,
    )
    table.add_column("status", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for check in checks:
        table.add_row(f"[{_STYLE[check.status]}]{check.status.upper()}[/]", escape(check.name), escape(check.detail))
    console.print(table)
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        console.print(f"[bold red]rushhour would misread this stack:[/] {escape(', '.join(failed))}", highlight=False)
    else:
        console.print(
            "[bold green]rushhour understands this stack[/] (warnings, if any, only limit the report)", highlight=False
        )
    console.print(f"probe records: {escape(folder)}", highlight=False)
