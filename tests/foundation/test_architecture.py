"""Dependencies point one way; heavy or patching modules stay where docs/architecture.md puts them.

Two checks. The static one walks every module of rushhour's packages (``pkgutil.walk_packages``),
reads its imports with ``ast`` (function-local lazy imports included) and checks each against the
rules below; it is shown to fail on a planted bad import. The runtime one imports the parent-side
modules in a fresh interpreter and fails if gevent, locust (or, for the bottom layers, numpy/pandas/
pydantic) got loaded, which catches what the static one cannot (an import through a third party).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------------------- the rules
# (docs/architecture.md "Packages and who may import whom" repeats these tables; keep both true)

PACKAGES = ("stacks", "scenarios", "loadgen", "audit", "reports", "rushhour", "testbed", "sim")

# Which of rushhour's own packages each package may import (a package may always import itself).
# stacks ◄─ scenarios ◄─ loadgen ◄─ audit ◄─ reports ◄─ rushhour; testbed stands alone; sim drives the
# testbed's model with loadgen's pure workload modules in virtual time, and only rushhour imports it.
ALLOWED_PACKAGES: dict[str, frozenset[str]] = {
    "stacks": frozenset(),
    "scenarios": frozenset({"stacks"}),
    "loadgen": frozenset({"stacks", "scenarios"}),
    "audit": frozenset({"stacks", "scenarios"}),  # + the loadgen modules of ALLOWED_MODULES only
    "reports": frozenset({"stacks", "scenarios", "audit"}),
    "rushhour": frozenset({"stacks", "scenarios", "loadgen", "audit", "reports", "testbed", "sim"}),
    "testbed": frozenset(),
    "sim": frozenset({"stacks", "scenarios", "loadgen", "testbed"}),
}
# Single modules a package may import from a package it may not import as a whole. The audit reads
# records through their contract (stdlib only) and judges what the doctor's parent side collected;
# it never imports the loadgen package face, the wire, the runner or anything of the Locust child.
ALLOWED_MODULES: dict[str, frozenset[str]] = {
    "audit": frozenset({"loadgen.record", "loadgen.columns", "loadgen.manifest", "loadgen.diagnose"}),
}

# The Locust/gevent child: the subpackage loadgen/engine/ holds every module that runs in a load,
# calibration or doctor process. Only it may import gevent or locust, and no module outside it may
# import it (importing locust monkey-patches the whole process for gevent); it may import the pure
# parent-side modules (loadgen.record, schedule, tiers, prompts, probes, endpoint, …). ``rushhour.locust``
# is the public face of the Locust users (loadgen.engine.users) for a user's own locustfile: it runs in
# Locust's process only, so it is part of the child and the CLI never imports it.
CHILD = frozenset({"loadgen.engine", "rushhour.locust"})
# Third-party modules and the only packages/modules that may import them (directly).
THIRD_PARTY_ONLY_IN: dict[str, frozenset[str]] = {
    "gevent": CHILD,
    "locust": CHILD,
    # never stacks, scenarios, loadgen, and of the testbed only its prefix hash (block ids in array passes: the
    # simulator computes the same ids from a prompt's parts, in sim)
    "numpy": frozenset({"audit", "reports", "rushhour", "sim", "testbed.prefix_hash"}),
    "pandas": frozenset({"audit", "reports", "rushhour"}),
    # loadgen.datasets reads a persona's Parquet conversation dataset (imported lazily, only for one);
    # loadgen.columns writes a shard's columnar sidecar (imported lazily by the shard writer that keeps one)
    "pyarrow": frozenset({"audit", "reports", "rushhour", "loadgen.datasets", "loadgen.columns"}),
    "aiohttp": frozenset({"testbed"}),
    "uvloop": frozenset({"testbed"}),
    "jinja2": frozenset({"reports", "loadgen.tokens", "loadgen.chat_template"}),  # a model's chat template, bounded
    "tokenizers": frozenset({"loadgen.tokens"}),
    "markupsafe": frozenset({"reports"}),
    "typer": frozenset({"rushhour"}),
    "cryptography": frozenset({"rushhour.signing"}),  # Ed25519 of a run folder's integrity manifest
}
# Modules that import nothing outside the standard library (and their own package, for record.py).
STDLIB_ONLY = frozenset({"stacks", "loadgen.record", "loadgen.manifest", "loadgen.runkey", "audit.integrity"})
# ... except an optional accelerator that writes the same bytes (the module falls back to the stdlib without it)
ACCELERATORS = {"loadgen.record": frozenset({"orjson"})}

# Violations that exist today and are named, not hidden: each must still exist (so the list only
# shrinks). Empty since the loadgen layout split (issue 13) moved the probes' pure plan to loadgen.probes.
KNOWN: frozenset[str] = frozenset()


# ----------------------------------------------------------------------------------------- the checker


def _inside(module: str, prefixes: Iterable[str]) -> bool:
    """``module`` is one of ``prefixes`` or inside one of them (``a.b`` is inside ``a``)."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def module_files(root: Path, packages: Iterable[str]) -> dict[str, tuple[Path, bool]]:
    """Every module of ``packages`` under ``root``: name → (file, is a package).

    ``pkgutil.walk_packages`` without its one side effect: it imports each subpackage to recurse,
    which would load gevent into this process and resolve a planted tree to the installed packages;
    ``pkgutil.iter_modules`` on each package folder enumerates the same modules from the files alone.
    """
    out: dict[str, tuple[Path, bool]] = {}

    def walk(folder: Path, name: str) -> None:
        out[name] = (folder / "__init__.py", True)
        for info in pkgutil.iter_modules([str(folder)], prefix=name + "."):
            leaf = info.name.rsplit(".", 1)[1]
            if info.ispkg:
                walk(folder / leaf, info.name)
            else:
                out[info.name] = (folder / f"{leaf}.py", False)

    for package in packages:
        if (root / package / "__init__.py").exists():
            walk(root / package, package)
    return out


def imports_of(modules: Mapping[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Every module's imports (absolute names), from its source: module-level and function-local alike.

    ``from pkg import name`` counts as ``pkg.name`` when that is a module, else as ``pkg``.
    """
    out: dict[str, set[str]] = {}
    for name, (path, is_pkg) in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = name.split(".") if is_pkg else name.split(".")[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in modules else base)
        out[name] = found
    return out


def violations(imports: Mapping[str, set[str]]) -> list[str]:
    """Every import that breaks a rule, one sentence each (pure: works on any module map)."""
    out: list[str] = []
    for module, targets in sorted(imports.items()):
        package = module.split(".")[0]
        for target in sorted(targets):
            top = target.split(".")[0]
            if top == "__future__":
                continue
            if top in PACKAGES:
                if top != package and top not in ALLOWED_PACKAGES.get(package, frozenset()) and not _inside(
                        target, ALLOWED_MODULES.get(package, frozenset())):
                    out.append(f"{module} imports {target}: {package} may not import {top}")
                if _inside(target, CHILD) and not _inside(module, CHILD):
                    out.append(f"{module} imports {target} (a Locust-child module) outside the child")
                if _inside(module, STDLIB_ONLY) and top != package:
                    out.append(f"{module} imports {target}: it must stay standard library only")
                continue
            if top in sys.stdlib_module_names:
                continue
            if _inside(module, STDLIB_ONLY) and top not in ACCELERATORS.get(module, ()):
                out.append(f"{module} imports {target}: it must stay standard library only")
            allowed = THIRD_PARTY_ONLY_IN.get(top)
            if allowed is not None and not _inside(module, allowed):
                out.append(f"{module} imports {top}: only {', '.join(sorted(allowed))} may")
    return out


# ----------------------------------------------------------------------------------------- the tests


def test_every_module_follows_the_rules() -> None:
    modules = module_files(ROOT, PACKAGES)
    assert {"loadgen.engine.wire.client", "loadgen.engine.personas.chat", "audit.build", "testbed.server"} <= set(
        modules)
    found = violations(imports_of(modules))
    new = [v for v in found if v not in KNOWN]
    assert not new, "\n".join(new)
    gone = sorted(KNOWN - set(found))
    assert not gone, f"fixed: remove from KNOWN: {gone}"


def test_a_planted_bad_import_fails(tmp_path: Path) -> None:
    """A temporary package with bad imports, lazy ones included: the checker names every one."""
    pkg = tmp_path / "reports"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "ok.py").write_text("from rushhour.audit.summary import Summary\nfrom . import sub\n")
    (pkg / "sub" / "bad.py").write_text(
        "import json\n"
        "from rushhour.loadgen.record import iter_run\n"  # reports → loadgen: the layering break of issue 13
        "def later():\n"
        "    import gevent\n"  # a lazy import is an import
        "    from rushhour.loadgen import wire\n"
        "    from ..ok import Summary\n"
    )
    (tmp_path / "loadgen" / "wire").mkdir(parents=True)
    for path in ("loadgen/__init__.py", "loadgen/wire/__init__.py", "loadgen/record.py"):
        (tmp_path / path).write_text("")
    modules = module_files(tmp_path, ("reports", "loadgen"))
    imports = imports_of(modules)
    assert "loadgen.wire" in imports["reports.sub.bad"] and "reports.ok" in imports["reports.sub.bad"]
    found = violations(imports)
    assert found == [
        "reports.sub.bad imports gevent: only " + ", ".join(sorted(CHILD)) + " may",
        "reports.sub.bad imports loadgen.record: reports may not import loadgen",
        "reports.sub.bad imports loadgen.wire: reports may not import loadgen",
    ]


@pytest.mark.parametrize(("imports", "expected"), [
    ({"audit.x": {"loadgen.engine.wire.client"}}, [
        "audit.x imports loadgen.engine.wire.client: audit may not import loadgen",
        "audit.x imports loadgen.engine.wire.client (a Locust-child module) outside the child"]),
    ({"loadgen.runner": {"loadgen.engine.calibrate"}}, [
        "loadgen.runner imports loadgen.engine.calibrate (a Locust-child module) outside the child"]),
    ({"audit.x": {"loadgen.record", "loadgen.diagnose", "stacks", "numpy"}}, []),
    ({"audit.x": {"loadgen"}}, ["audit.x imports loadgen: audit may not import loadgen"]),
    ({"loadgen.sweep": {"numpy"}}, [
        "loadgen.sweep imports numpy: only audit, reports, rushhour, sim, testbed.prefix_hash may"]),
    ({"testbed.engine": {"numpy"}}, [
        "testbed.engine imports numpy: only audit, reports, rushhour, sim, testbed.prefix_hash may"]),
    ({"testbed.prefix_hash": {"numpy"}}, []),
    ({"stacks.x": {"yaml"}}, ["stacks.x imports yaml: it must stay standard library only"]),
    ({"scenarios.x": {"audit.summary"}}, ["scenarios.x imports audit.summary: scenarios may not import audit"]),
    ({"testbed.x": {"stacks"}}, ["testbed.x imports stacks: testbed may not import stacks"]),
    ({"loadgen.scrape": {"aiohttp"}}, ["loadgen.scrape imports aiohttp: only testbed may"]),
    ({"loadgen.engine.worker": {"gevent", "loadgen.engine.attempts"}}, []),
    ({"rushhour.locust": {"loadgen.engine.users"}}, []),
    ({"rushhour.cli": {"rushhour.locust"}}, [
        "rushhour.cli imports rushhour.locust (a Locust-child module) outside the child"]),
])
def test_rules_on_synthetic_module_maps(imports: dict[str, set[str]], expected: list[str]) -> None:
    assert violations(imports) == expected


# ----------------------------------------------------------------------------------------- at runtime

# rushhour's own packages and the third-party ones: ``stacks`` is the bottom layer and imports none
OWN = {"scenarios", "loadgen", "testbed", "audit", "reports", "rushhour", "sim"}
THIRD_PARTY = {"locust", "gevent", "numpy", "pandas", "pydantic", "yaml", "aiohttp", "prometheus_client",
               "orjson", "httptools", "typer", "rich", "jinja2", "pyarrow", "psutil", "pybreaker"}

FORBIDDEN = {
    "stacks": OWN | THIRD_PARTY,
    # importing locust monkey-patches the process for gevent: never outside the Locust subprocess
    "audit": {"locust", "gevent"},
    "audit.summary": {"locust", "gevent"},
    "reports": {"locust", "gevent"},
    "scenarios": {"locust", "gevent", "numpy", "pandas"},
    "testbed": {"locust", "gevent", "numpy", "pandas", "pydantic"},
    "loadgen": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.record": {"locust", "gevent", "numpy", "pandas", "pydantic", "yaml"},
    "loadgen.manifest": {"locust", "gevent", "numpy", "pandas", "pydantic", "yaml"},
    "loadgen.runner": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.tiers": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.diagnose": {"locust", "gevent", "numpy", "pandas"},
    # pure planning: probe plans, dry runs, sweep/study scaling
    "loadgen.probes": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.dryrun": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.sweep": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.endpoint": {"locust", "gevent", "numpy", "pandas", "pydantic", "httptools"},
    "rushhour.cli": {"locust", "gevent", "numpy", "pandas", "aiohttp"},
    "rushhour": {"locust", "gevent"},
    # the simulator: the testbed's model without its server, loadgen's workload without the Locust child
    "sim.run": {"locust", "gevent", "pandas", "aiohttp"},
}


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_import_does_not_load_forbidden_modules(module: str) -> None:
    code = (
        "import importlib, sys, json\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout))
    assert not (FORBIDDEN[module] & loaded), f"{module} loads {sorted(FORBIDDEN[module] & loaded)}"


def test_pure_planning_runs_without_gevent(tmp_path: Path) -> None:
    """A dry run, the probes' plan and a sweep's scaling, run (not only imported): no gevent."""
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from rushhour.loadgen.runner import RunOptions, run_scenario\n"
        "from rushhour.loadgen.probes import probe_plan, probe_scenario\n"
        "from rushhour.loadgen.sweep import plan_sweep, scaled_scenario\n"
        "from rushhour.scenarios import load_scenario\n"
        "sc = load_scenario('demo')\n"
        "assert run_scenario('demo', RunOptions(dry_run=True)).exit_code == 0\n"
        "probe_scenario(sc); probe_plan(sc)\n"
        f"plan_sweep(sc, [0.5, 1.0], out_dir=Path({str(tmp_path)!r})); scaled_scenario(sc, 2.0)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout.splitlines()[-1]))
    assert not ({"gevent", "locust"} & loaded), sorted({"gevent", "locust"} & loaded)
