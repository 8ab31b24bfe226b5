"""Suite-wide: the shared test support on the path, and every rushhour module imported under its one name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/support (the one CLI runner, scenario builder, run helper and script loader) is imported as `support`,
# whatever pytest's import mode and in every xdist worker: each loads this file before any test module.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# The repository's package folders; installed they exist only as rushhour.<folder>. A checkout's root is on sys.path
# (the editable install), so `import audit` would still work there and load a second copy of every module it
# touches: module state and isinstance checks split. Nothing may do it.
OLD_NAMES = frozenset({"stacks", "scenarios", "records", "loadgen", "testbed", "audit", "studies", "reports", "sim"})


def old_names_loaded(modules: list[str]) -> list[str]:
    """The loaded modules named by an old top-level name (pure)."""
    return sorted(m for m in modules if m.split(".")[0] in OLD_NAMES)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test (or the code it ran in this process) imported an old top-level name."""
    old = old_names_loaded(list(sys.modules))
    if old:
        print(f"\nerror: imported by an old top-level name (import them as rushhour.X): {', '.join(old[:10])}",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
