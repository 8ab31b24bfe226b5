"""Heavy imports off a run's critical path: factories that import when called, and imports begun in the background."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any


def later(module: str, name: str) -> Callable[..., Any]:
    """``module.name`` called as a factory, imported at its first call, not when the factory is made."""

    def make(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    make.__qualname__ = make.__name__ = name
    return make


def _import_quietly(modules: tuple[str, ...]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # whoever needs it imports it again and says what is wrong, in one line
            continue


def warm(*modules: str) -> threading.Thread:
    """Begin importing ``modules`` in a thread while this process waits on its children (a testbed, calibration).

    ``rushhour run`` needs the audit (pandas, pyarrow: a second or two of CPU on a busy 2-core machine) only once
    the load starts (its watchers) or ends (the audit): imported first, it delayed every child by that much. An
    import of a module the thread is still importing waits for it (Python's per-module import lock), so the first
    user gets the whole module. Not a daemon: the interpreter never ends in the middle of an import.
    """
    thread = threading.Thread(target=_import_quietly, args=(modules,), name="rushhour-warm-imports")
    thread.start()
    return thread
