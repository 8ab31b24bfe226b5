"""Persona kinds are a registry: no code asks a persona which class it is, and every layer's per-kind table is whole.

The scenarios layer lists the kinds (``model.Persona``, read by ``scenarios/kinds.py``); each higher layer keys its
per-kind behaviour in one table passed through ``kinds.every_kind``, which refuses, at import, a table that lacks a
kind. These tests walk the source for ladders (``isinstance(p, ChatPersona)``, ``p.kind == "chat"``), shown to fail
on planted ones, and register a fake kind in a real interpreter to show a forgotten table fails in one line.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rushhour.scenarios import kinds

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("stacks", "scenarios", "records", "testbed", "loadgen", "sim", "audit", "studies", "reports", "rushhour")
# the registry may ask a persona its class; nothing else may (shrink-only: add nothing here)
ALLOWED = frozenset({"scenarios/kinds.py"})


def _sources() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for package in PACKAGES
            for path in sorted((ROOT / package).rglob("*.py"))}


def _module(path: str) -> str:
    """``loadgen/flow/kinds.py`` → ``rushhour.loadgen.flow.kinds`` (``rushhour/fits.py`` → ``rushhour.fits``)."""
    name = path.removesuffix(".py").replace("/", ".")
    return name if name.startswith("rushhour.") else f"rushhour.{name}"


def _kind_side(node: ast.expr) -> bool:
    """``x.kind``, ``kind`` or ``x.get("kind")``: an expression that reads a persona's kind."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Name):
        return node.id == "kind"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind")


def _names_a_kind(node: ast.expr) -> bool:
    """A kind's tag as a constant, alone or in a tuple/list/set."""
    if isinstance(node, ast.Constant):
        return node.value in kinds.NAMES
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(_names_a_kind(e) for e in node.elts)


def _persona_class(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    if isinstance(node, ast.Tuple):
        return any(_persona_class(e) for e in node.elts)
    return name.endswith("Persona")


def ladders(source: str) -> list[int]:
    """Lines that dispatch on a persona's kind: ``isinstance(_, <X>Persona)`` or a kind compared to a kind's tag."""
    out: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                and len(node.args) == 2 and _persona_class(node.args[1])):
            out.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_kind_side(s) for s in sides) and any(_names_a_kind(s) for s in sides):
                out.append(node.lineno)
    return out


def test_no_persona_kind_ladder_outside_the_registry() -> None:
    found = [f"{path}:{line}" for path, source in _sources().items() if path not in ALLOWED
             for line in ladders(source)]
    assert not found, "dispatch by a kind's table (scenarios/kinds.py), not by asking the class: " + ", ".join(found)


def test_planted_ladders_are_found() -> None:
    planted = textwrap.dedent("""
        if isinstance(p, ChatPersona): pass
        if isinstance(p, (model.AgentSwarmPersona, int)): pass
        if p.kind == "agent_trace": pass
        if data.get("kind") in ("chat", "x"): pass
        if isinstance(p, Phase) or p.kind == "hold" or kind == other: pass
    """)
    assert ladders(planted) == [2, 3, 4, 5]


def test_every_layer_table_names_every_kind_once() -> None:
    # import every module that keys a table by kind (in a child: one of them is the gevent engine's worker)
    modules = sorted({_module(path) for path, source in _sources().items()
                      if "every_kind(" in source and path not in ALLOWED})
    script = ("import json, importlib\n"
              f"for m in {modules!r}: importlib.import_module(m)\n"
              "from rushhour.scenarios import kinds\n"
              "print(json.dumps({w: sorted(t) for w, t in kinds.TABLES.items()}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    tables = json.loads(done.stdout)
    assert sorted(tables) == modules  # each module holds one table, all registered
    assert all(names == sorted(kinds.NAMES) for names in tables.values()), tables
    assert len(kinds.NAMES) == 4 and set(kinds.NAMES) == {"chat", "agent_swarm", "trace_replay", "agent_trace"}


FAKE = '''
"""A fake persona kind: its model in one module."""
from typing import ClassVar, Literal
from rushhour.scenarios.model import Strict

class FakePersona(Strict):
    kind: Literal["fake"]
    RATE_PATH: ClassVar[tuple[str, ...] | None] = ("rate",)
    SWARM: ClassVar[bool] = False
    name: str
    tier: str
    rate: float

    def has_arrival_rate(self) -> bool:
        return True
'''


def test_a_new_kind_is_one_module_and_one_line(tmp_path: Path) -> None:
    (tmp_path / "fake_kind.py").write_text(FAKE)
    script = textwrap.dedent("""
        import sys
        from rushhour.scenarios import model
        import fake_kind
        model.PERSONA_MODELS["fake"] = fake_kind.FakePersona  # the one line (in the tree: one entry in model.Persona)
        from rushhour.scenarios import kinds
        assert kinds.model("fake") is fake_kind.FakePersona and "fake" in kinds.NAMES
        data = {"personas": [{"kind": "fake", "name": "f", "tier": "t", "rate": 1e9}],
                "phases": [{"name": "p", "duration": 60}]}
        print([r.loc for r in model.span_problems(data)])  # the scenario layer's checks come from the module
        try:
            import rushhour.loadgen.traces  # a layer that keys a behaviour by kind (trace files)
        except kinds.MissingKind as exc:
            print(exc)
        else:
            print("no table noticed the new kind")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})  # this checkout's rushhour, the fake
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[('personas', 0, 'rate')]",
                                        "rushhour.loadgen.traces: per-kind table lacks fake"]
