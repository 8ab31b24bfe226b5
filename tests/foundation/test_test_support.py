"""The suite keeps one CLI runner and one script loader (tests/support): no test file grows a copy of its own."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = TESTS / "support"

# Copies that exist today and are named, not hidden: each must still exist (so the list only shrinks), and a file
# not listed may have none. "runner": a child process of the CLI (`python -m rushhour.cli`, `-c "from rushhour.cli
# import main"` or the console script) started by the file itself; "loader": importlib's spec_from_file_location.
# All of them are in files others were changing when tests/support landed (issue 36): each can take
# support.rushhour / cli_command / load_script as it is (see docs/development.md, "Test support").
KNOWN: dict[str, frozenset[str]] = {
    "e2e/test_locust_native.py": frozenset({"runner"}),
    "real/conftest.py": frozenset({"loader"}),  # engines/serve.py
    "real/helpers.py": frozenset({"runner"}),  # run_rushhour: a run against a real engine
    "real/test_br02_real.py": frozenset({"runner"}),
    "real/test_calibrate_real.py": frozenset({"runner"}),
    "real/test_doctor_real.py": frozenset({"runner"}),
    "real/test_fail_fast_real.py": frozenset({"runner"}),
    "real/test_tools_real.py": frozenset({"runner"}),
}


def copies(source: str) -> frozenset[str]:
    """What ``source`` starts or loads by hand instead of through tests/support (pure)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple)):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if any(a == "-m" and b == "rushhour.cli" for a, b in itertools.pairwise(words)):
                found.add("runner")  # [sys.executable, "-m", "rushhour.cli", ...]
        elif isinstance(node, ast.Constant) and "from rushhour.cli import" in str(node.value):
            found.add("runner")  # [sys.executable, "-c", "...; from rushhour.cli import main; main()"]
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
              and node.right.value == "rushhour" and "executable" in ast.unparse(node.left)):
            found.add("runner")  # Path(sys.executable).parent / "rushhour": the console script
        elif isinstance(node, (ast.Name, ast.Attribute)) and "spec_from_file_location" in ast.unparse(node):
            found.add("loader")
    return frozenset(found)


def _scan() -> dict[str, frozenset[str]]:
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        if SUPPORT in path.parents or path == Path(__file__).resolve():
            continue  # the support itself, and this checker's own examples
        kinds = copies(path.read_text())
        if kinds:
            found[path.relative_to(TESTS).as_posix()] = kinds
    return found


def test_no_test_file_runs_the_cli_or_loads_a_script_by_hand() -> None:
    found = _scan()
    new = {p: sorted(k - KNOWN.get(p, frozenset())) for p, k in found.items() if k - KNOWN.get(p, frozenset())}
    assert not new, f"use tests/support (rushhour, cli_command, load_script) instead: {new}"
    gone = {p: sorted(k - found.get(p, frozenset())) for p, k in KNOWN.items() if k - found.get(p, frozenset())}
    assert not gone, f"gone: remove from KNOWN (the list only shrinks): {gone}"


def test_the_check_sees_each_kind_of_copy() -> None:
    assert copies('subprocess.run([sys.executable, "-m", "rushhour.cli", "run"])') == {"runner"}
    assert copies('subprocess.Popen((sys.executable, "-m", "rushhour.cli"))') == {"runner"}
    assert copies("CLI = [sys.executable, '-c', 'import sys; from rushhour.cli import main; main()']") == {"runner"}
    assert copies('SCRIPT = Path(sys.executable).parent / "rushhour"') == {"runner"}
    assert copies("spec = importlib.util.spec_from_file_location('x', path)") == {"loader"}
    # the support's own names, and the CLI module named as a module (the architecture test's tables)
    assert copies("from support import rushhour\nrushhour('run', path)\nmonkeypatch.setattr('rushhour.cli.x', 1)\n"
                  "LIMITS = {'rushhour.cli': {'locust'}}") == frozenset()
