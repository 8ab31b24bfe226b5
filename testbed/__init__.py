"""rushhour testbed: an embedded, faithful tiered LLM serving stack with a ground-truth ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # keep `import testbed` light: aiohttp loads only when the server runs
    from rushhour.testbed.cli import main as main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    """Load `main` lazily."""
    if name == "main":
        from rushhour.testbed.cli import main

        return main
    raise AttributeError(name)
