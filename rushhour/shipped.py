"""What the docs send a user to, printed by a command: a built-in scenario, the example locustfile, the schemas.

A pip user has no checkout, so every file the docs name must ship in the wheel and be reachable without a
path into it (registered by ``rushhour.cli``; imports stay lazy).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rushhour.consoles import make_console, print_error

console = make_console(stderr=True)

EXIT_USAGE = 2

# name → file: the wheel carries examples/ inside this package (pyproject's force-include), a checkout beside it
EXAMPLES = {"locustfile": "locustfile.py", "dockerfile": "Dockerfile"}
PACKAGED_EXAMPLES = Path(__file__).resolve().parent / "examples"
CHECKOUT = Path(__file__).resolve().parents[1]


def builtin_scenarios() -> dict[str, Path]:
    """The built-in scenario library by name."""
    from rushhour.scenarios.loader import LIBRARY_DIR

    return {path.stem: path for path in sorted(LIBRARY_DIR.glob("*.yaml"))}


def scenario_text(name: str) -> str:
    """A built-in scenario's YAML as shipped; LookupError naming the built-ins for any other name."""
    library = builtin_scenarios()
    path = library.get(name)  # looked up, never joined: a name is not a path
    if path is None:
        raise LookupError(f"no built-in scenario {name!r} (built-in scenarios: {', '.join(library)})")
    return path.read_text()


def example_path(name: str) -> Path:
    """Where an example file is: inside the installed package, or in the checkout this code runs from."""
    file = EXAMPLES.get(name)
    if file is None:
        raise LookupError(f"no example {name!r} (examples: {', '.join(EXAMPLES)})")
    packaged = PACKAGED_EXAMPLES / file
    if packaged.is_file():
        return packaged
    in_checkout = CHECKOUT / "examples" / file
    if (CHECKOUT / "pyproject.toml").is_file() and in_checkout.is_file():
        return in_checkout
    raise LookupError(f"example {name!r} is missing from this installation ({packaged})")


def _fail(message: str) -> typer.Exit:
    print_error(console, message)  # the message quotes what the user typed: text, never markup
    return typer.Exit(EXIT_USAGE)


def scenario_show(
    name: Annotated[str, typer.Argument(help="a built-in scenario (see `rushhour scenario list`)")],
) -> None:
    """Print a built-in scenario's YAML, to copy as a template: `rushhour scenario show demo > my.yaml`."""
    try:
        sys.stdout.write(scenario_text(name))
    except LookupError as exc:
        raise _fail(str(exc.args[0])) from None


def example(
    name: Annotated[str, typer.Argument(help="locustfile (rushhour's users in plain Locust) or dockerfile (the "
                                            "image of `rushhour k8s`, built from a wheel)")],
) -> None:
    """Print a shipped example: `rushhour example locustfile > locustfile.py`, `rushhour example dockerfile`."""
    try:
        sys.stdout.write(example_path(name).read_text())
    except LookupError as exc:
        raise _fail(str(exc.args[0])) from None


schema_app = typer.Typer(help="Print the JSON Schema of summary.json (the scenario's: `rushhour scenario schema`).",
                         no_args_is_help=True)


@schema_app.command("summary")
def schema_summary() -> None:
    """Print the JSON Schema of summary.json (the audit's output), as docs/summary.schema.json has it."""
    from rushhour.audit.schema import summary_schema_text

    sys.stdout.write(summary_schema_text())

