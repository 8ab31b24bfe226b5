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

# The layer order: a package may import only packages of a lower rank (same rank: not each other), and within
# that, only what its row of MAY_IMPORT names — one table of the package limits, no per-module exceptions.
# stacks, testbed ◄ scenarios ◄ records ◄ loadgen ◄ sim ◄ audit ◄ studies ◄ reports ◄ rushhour
RANK: dict[str, int] = {"stacks": 0, "testbed": 0, "scenarios": 1, "records": 2, "loadgen": 3, "sim": 4, "audit": 5,
                        "studies": 6, "reports": 7, "rushhour": 8}
PACKAGES = tuple(RANK)
# Installed, they are one namespace: each folder of the checkout is the subpackage rushhour.<folder>, and every module
# is imported under that one name (the rules below speak of layers by folder: rushhour.audit.x is audit.x here).
SUBPACKAGES = frozenset(PACKAGES) - {"rushhour"}
MAY_IMPORT: dict[str, frozenset[str]] = {
    "stacks": frozenset(),  # standard library only
    "testbed": frozenset(),  # runs as its own process: nothing of rushhour's
    "scenarios": frozenset({"stacks"}),
    "records": frozenset({"stacks", "scenarios"}),  # what a run folder holds before the audit
    "loadgen": frozenset({"stacks", "scenarios", "records"}),
    # the testbed's model with loadgen's personas in virtual time; only rushhour imports it
    "sim": frozenset({"stacks", "scenarios", "records", "loadgen", "testbed"}),
    # the audit reads records only through records/, never the load generator, the wire or the child
    "audit": frozenset({"stacks", "scenarios", "records"}),
    "studies": frozenset({"stacks", "scenarios", "records", "audit"}),  # many runs in: the audit's face
    # records reach reports only through the audit's attempts table and the studies' results
    "reports": frozenset({"stacks", "scenarios", "audit", "studies"}),
    "rushhour": frozenset(PACKAGES) - {"rushhour"},
}

# The Locust/gevent child: the subpackage loadgen/engine/ holds every module that runs in a load,
# calibration or doctor process. Only it may import gevent or locust, and no module outside it may
# import it (importing locust monkey-patches the whole process for gevent); it may import the pure
# parent-side modules and records (records.record, loadgen.schedule, tiers, prompts, probes, …). ``rushhour.locust``
# is the public face of the Locust users (loadgen.engine.users) for a user's own locustfile: it runs in
# Locust's process only, so it is part of the child and the CLI never imports it.
CHILD = frozenset({"loadgen.engine", "rushhour.locust"})
# Modules of rushhour's that only some packages may import, whatever their layer allows: the runner drives a run's
# processes and only the CLI starts runs; the simulator and the other verbs prepare one with loadgen.prepare.
ONLY_IMPORTED_BY: dict[str, frozenset[str]] = {"loadgen.runner": frozenset({"rushhour"})}
# Third-party modules and the only packages/modules that may import them (directly).
THIRD_PARTY_ONLY_IN: dict[str, frozenset[str]] = {
    "gevent": CHILD,
    "locust": CHILD,
    # never stacks, scenarios, loadgen, and of the testbed only its prefix hash (block ids in array passes: the
    # simulator computes the same ids from a prompt's parts, in sim)
    "numpy": frozenset({"audit", "studies", "reports", "rushhour", "sim", "testbed.prefix_hash"}),
    "pandas": frozenset({"audit", "studies", "reports", "rushhour"}),
    # loadgen.datasets reads a persona's Parquet conversation dataset (imported lazily, only for one);
    # loadgen.columns writes a shard's columnar sidecar (imported lazily by the shard writer that keeps one)
    "pyarrow": frozenset({"audit", "studies", "reports", "rushhour", "loadgen.datasets", "records.columns"}),
    "aiohttp": frozenset({"testbed"}),
    "uvloop": frozenset({"testbed"}),
    "jinja2": frozenset({"reports", "loadgen.tokens", "loadgen.chat_template"}),  # a model's chat template, bounded
    "tokenizers": frozenset({"loadgen.tokens"}),
    "markupsafe": frozenset({"reports"}),
    "typer": frozenset({"rushhour"}),
    "cryptography": frozenset({"rushhour.signing"}),  # Ed25519 of a run folder's integrity manifest
    # the optional OTLP export (the `otel` extra): one module, imported by the CLI only for a run that asks
    "opentelemetry": frozenset({"audit.otlp"}),
}
# Modules that import nothing outside the standard library (and their own package, for record.py).
STDLIB_ONLY = frozenset({"stacks", "records.record", "records.schema", "records.redact", "records.writer",
                         "records.reader", "records.manifest", "loadgen.runkey", "audit.integrity"})
# ... except an optional accelerator that writes the same bytes (the module falls back to the stdlib without it)
ACCELERATORS = {"records.schema": frozenset({"orjson"})}

# Violations that exist today and are named, not hidden: each must still exist (so the list only shrinks).
# None today: the last three (import cycles inside loadgen, issue 36) were broken by moving the shared piece down.
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
                if not (folder / leaf).is_symlink():  # rushhour/audit → ../audit: walked as its own layer
                    walk(folder / leaf, info.name)
            else:
                out[info.name] = (folder / f"{leaf}.py", False)

    for package in packages:
        if (root / package / "__init__.py").exists():
            walk(root / package, package)
    return out


def layer_name(name: str) -> str:
    """A module's name by its layer folder: ``rushhour.audit.x`` is ``audit.x``; anything else as it is."""
    parts = name.split(".")
    return ".".join(parts[1:]) if len(parts) > 1 and parts[0] == "rushhour" and parts[1] in SUBPACKAGES else name


def imports_of(modules: Mapping[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Every module's imports (absolute names as imported), from its source: module-level and function-local alike.

    ``from pkg import name`` counts as ``pkg.name`` when that is a module, else as ``pkg``; a relative import counts
    under the name it resolves to (``rushhour.audit.x`` inside audit/).
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
                    base = f"rushhour.{base}" if parts and parts[0] in SUBPACKAGES else base
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if layer_name(sub) in modules else base)
        out[name] = found
    return out


def violations(imports: Mapping[str, set[str]], packages: Iterable[str] = ()) -> list[str]:
    """Every import that breaks a rule, one sentence each (pure: works on any module map; ``packages`` names the
    modules that are packages, for the own-``__init__`` rule)."""
    packages = frozenset(packages)
    out: list[str] = []
    for module, targets in sorted(imports.items()):
        package = module.split(".")[0]
        for written in sorted(targets):
            if written.split(".")[0] in SUBPACKAGES:  # the old top-level name: a second copy of the module
                out.append(f"{module} imports {written}: import it as rushhour.{written} (one name per module)")
                continue
            target = layer_name(written)
            top = target.split(".")[0]
            if top == "__future__":
                continue
            if top in PACKAGES:
                if module != target and module.startswith(target + ".") and target in packages:
                    out.append(f"{module} imports {target}: its own package's __init__ (import the module it needs)")
                if top != package and top not in MAY_IMPORT.get(package, frozenset()):
                    out.append(f"{module} imports {target}: {package} may not import {top}")
                if _inside(target, CHILD) and not _inside(module, CHILD):
                    out.append(f"{module} imports {target} (a Locust-child module) outside the child")
                for guarded, importers in ONLY_IMPORTED_BY.items():
                    if _inside(target, (guarded,)) and not _inside(module, importers) and module != guarded:
                        out.append(f"{module} imports {target}: only {', '.join(sorted(importers))} may")
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



def _private(name: str) -> bool:
    """``_x`` is private; ``__x__`` is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_crossings(modules: Mapping[str, tuple[Path, bool]]) -> list[str]:
    """Every private name a module takes from another of rushhour's modules: ``from m import _x`` or ``m._x`` on a
    module it imported (pure on the sources; one sentence each)."""
    out: set[str] = set()
    for name, (path, _is_pkg) in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases: dict[str, str] = {}  # a local name bound to one of rushhour's modules → that module
        foreign: dict[str, str] = {}  # a name imported from another of rushhour's modules → that module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                source = layer_name(node.module)
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in modules:
                        aliases[alias.asname or alias.name] = sub
                    elif source in modules and source != name and _private(alias.name):
                        out.add(f"{name} imports {source}.{alias.name}: a private name of another module")
                    elif source in modules and source != name:
                        foreign[alias.asname or alias.name] = source
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and layer_name(alias.name) in modules:
                        aliases[alias.asname] = layer_name(alias.name)
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            bases = [foreign[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in foreign]
            for node in (ast.walk(cls) if bases else ()):
                if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Call)
                        and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"):
                    out.add(f"{name}.{cls.name} overrides {bases[0]}'s private {node.attr}: a seam must be public")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)
                    and aliases.get(node.value.id, name) != name):
                out.add(f"{name} uses {aliases[node.value.id]}.{node.attr}: a private name of another module")
    return sorted(out)


def import_cycles(imports: Mapping[str, set[str]]) -> list[str]:
    """Every cycle of imports between rushhour's modules (a strongly connected set, named sorted; pure)."""
    graph = {m: {layer_name(t) for t in targets if layer_name(t) in imports and layer_name(t) != m}
             for m, targets in imports.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[str] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.append(top)
                if top == node:
                    break
            # a package and the modules it re-exports form a loop by construction: only cycles between modules count
            if len(members) > 1 and not any(_inside(m, [p]) for p in members for m in members if m != p):
                found.append("import cycle: " + " ↔ ".join(sorted(members)))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


# ----------------------------------------------------------------------------------------- the tests


def all_findings(root: Path, packages: Iterable[str]) -> list[str]:
    """Every broken rule of the tree under ``root``: imports, private names, own ``__init__`` imports, cycles."""
    modules = module_files(root, packages)
    imports = imports_of(modules)
    found = violations(imports, [m for m, (_, is_pkg) in modules.items() if is_pkg])
    return found + private_crossings(modules) + import_cycles(imports)


def test_every_module_follows_the_rules() -> None:
    modules = module_files(ROOT, PACKAGES)
    assert {"loadgen.engine.wire.client", "loadgen.engine.personas.chat", "audit.build", "testbed.server",
            "records.record", "studies.knee"} <= set(modules)
    found = all_findings(ROOT, PACKAGES)
    new = [v for v in found if v not in KNOWN]
    assert not new, "\n".join(new)
    gone = sorted(KNOWN - set(found))
    assert not gone, f"fixed: remove from KNOWN: {gone}"


def test_the_table_is_a_layer_order() -> None:
    """Each package may import only packages of a lower rank: the table cannot hide a back-edge."""
    assert set(MAY_IMPORT) == set(RANK)
    for package, allowed in MAY_IMPORT.items():
        assert all(RANK[a] < RANK[package] for a in allowed), package


def test_the_audit_fingerprint_covers_exactly_what_the_audit_may_import() -> None:
    """Editing a study or a report never marks a stored summary stale; editing a record reader does."""
    from rushhour import audit

    assert set(audit.FINGERPRINTED) == {"audit"} | MAY_IMPORT["audit"]


def test_a_planted_bad_import_fails(tmp_path: Path) -> None:
    """A temporary tree with a back-edge, a private import, an own-__init__ import and a cycle: each is named."""
    pkg = tmp_path / "reports"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "ok.py").write_text("from rushhour.audit.summary import Summary\nfrom . import sub\n")
    (pkg / "sub" / "bad.py").write_text(
        "import json\n"
        "from rushhour.records.record import iter_run\n"  # reports → records: a back-edge past the audit
        "from rushhour.reports.ok import _hidden\n"  # a private name of another module
        "from rushhour.reports import sub\n"  # its own package's __init__... as a module: allowed
        "def later():\n"
        "    import gevent\n"  # a lazy import is an import
        "    from rushhour.loadgen import wire\n"
        "    from ..ok import Summary\n"
        "    from rushhour.reports.sub import helper\n"  # its own package's __init__
        "    from rushhour.reports import ok as page\n"
        "    return page._kit\n"  # a private attribute of another module
    )
    (pkg / "a.py").write_text("from rushhour.reports import b\n")
    (pkg / "b.py").write_text("def f():\n    from rushhour.reports import a\n")  # a cycle, lazy or not
    (tmp_path / "loadgen" / "wire").mkdir(parents=True)
    (tmp_path / "records").mkdir()
    for path in ("loadgen/__init__.py", "loadgen/wire/__init__.py", "records/__init__.py", "records/record.py"):
        (tmp_path / path).write_text("")
    modules = module_files(tmp_path, ("reports", "loadgen", "records"))
    imports = imports_of(modules)
    assert {"rushhour.loadgen.wire", "rushhour.reports.ok"} <= imports["reports.sub.bad"]
    assert all_findings(tmp_path, ("reports", "loadgen", "records")) == [
        "reports.sub.bad imports gevent: only " + ", ".join(sorted(CHILD)) + " may",
        "reports.sub.bad imports loadgen.wire: reports may not import loadgen",
        "reports.sub.bad imports records.record: reports may not import records",
        "reports.sub.bad imports reports.sub: its own package's __init__ (import the module it needs)",
        "reports.sub.bad imports reports.ok._hidden: a private name of another module",
        "reports.sub.bad uses reports.ok._kit: a private name of another module",
        "import cycle: reports.a ↔ reports.b",
    ]


@pytest.mark.parametrize(("imports", "expected"), [
    ({"audit.x": {"rushhour.loadgen.engine.wire.client"}}, [
        "audit.x imports loadgen.engine.wire.client: audit may not import loadgen",
        "audit.x imports loadgen.engine.wire.client (a Locust-child module) outside the child"]),
    ({"loadgen.runner": {"rushhour.loadgen.engine.calibrate"}}, [
        "loadgen.runner imports loadgen.engine.calibrate (a Locust-child module) outside the child"]),
    ({"audit.x": {"rushhour.records.record", "rushhour.records.doctor", "rushhour.stacks", "numpy"}}, []),
    ({"audit.x": {"rushhour.loadgen.diagnose"}}, ["audit.x imports loadgen.diagnose: audit may not import loadgen"]),
    ({"studies.x": {"rushhour.audit", "rushhour.records.record", "pandas"}}, []),
    ({"audit.x": {"rushhour.studies.knee"}}, ["audit.x imports studies.knee: audit may not import studies"]),
    ({"reports.x": {"rushhour.studies.knee", "rushhour.audit"}}, []),
    ({"audit.x": {"rushhour.loadgen"}}, ["audit.x imports loadgen: audit may not import loadgen"]),
    ({"loadgen.runner": {"numpy"}}, [
        "loadgen.runner imports numpy: only audit, reports, rushhour, sim, studies, testbed.prefix_hash may"]),
    ({"testbed.engine": {"numpy"}}, [
        "testbed.engine imports numpy: only audit, reports, rushhour, sim, studies, testbed.prefix_hash may"]),
    ({"testbed.prefix_hash": {"numpy"}}, []),
    # the simulator prepares a run as the runner does, and never drives one
    ({"sim.run": {"rushhour.loadgen.prepare", "rushhour.loadgen.lifecycle"}}, []),
    ({"sim.run": {"rushhour.loadgen.runner"}}, ["sim.run imports loadgen.runner: only rushhour may"]),
    ({"rushhour.cli": {"rushhour.loadgen.runner"}}, []),
    ({"stacks.x": {"yaml"}}, ["stacks.x imports yaml: it must stay standard library only"]),
    ({"scenarios.x": {"rushhour.audit.summary"}}, [
        "scenarios.x imports audit.summary: scenarios may not import audit"]),
    ({"testbed.x": {"rushhour.stacks"}}, ["testbed.x imports stacks: testbed may not import stacks"]),
    ({"loadgen.scrape": {"aiohttp"}}, ["loadgen.scrape imports aiohttp: only testbed may"]),
    ({"loadgen.engine.worker": {"gevent", "rushhour.loadgen.engine.attempts"}}, []),
    ({"rushhour.locust": {"rushhour.loadgen.engine.users"}}, []),
    # the old top-level names load a second copy of a module: never, whatever the layer allows
    ({"audit.x": {"records.record", "stacks"}}, [
        "audit.x imports records.record: import it as rushhour.records.record (one name per module)",
        "audit.x imports stacks: import it as rushhour.stacks (one name per module)"]),
    ({"audit.x": {"rushhour.cli"}}, ["audit.x imports rushhour.cli: audit may not import rushhour"]),
    ({"rushhour.cli": {"rushhour.locust"}}, [
        "rushhour.cli imports rushhour.locust (a Locust-child module) outside the child"]),
])
def test_rules_on_synthetic_module_maps(imports: dict[str, set[str]], expected: list[str]) -> None:
    assert violations(imports) == expected


# ----------------------------------------------------------------------------------------- at runtime

# rushhour's own packages and the third-party ones: ``stacks`` is the bottom layer and imports none
OWN = {"scenarios", "records", "loadgen", "testbed", "audit", "studies", "reports", "rushhour", "sim"}
THIRD_PARTY = {"locust", "gevent", "numpy", "pandas", "pydantic", "yaml", "aiohttp", "prometheus_client",
               "orjson", "httptools", "typer", "rich", "jinja2", "pyarrow", "psutil", "pybreaker", "opentelemetry"}

FORBIDDEN = {
    "stacks": OWN | THIRD_PARTY,
    # importing locust monkey-patches the process for gevent: never outside the Locust subprocess
    "audit": {"locust", "gevent", "opentelemetry"},
    # the live metrics (run --metrics-port) never bring the optional OTLP SDK along
    "audit.live": {"locust", "gevent", "opentelemetry"},
    "audit.summary": {"locust", "gevent"},
    "reports": {"locust", "gevent"},
    "scenarios": {"locust", "gevent", "numpy", "pandas"},
    "testbed": {"locust", "gevent", "numpy", "pandas", "pydantic"},
    "loadgen": {"locust", "gevent", "numpy", "pandas"},
    "records.record": {"locust", "gevent", "numpy", "pandas", "pydantic", "yaml"},
    "records.manifest": {"locust", "gevent", "numpy", "pandas", "pydantic", "yaml"},
    "loadgen.runner": {"locust", "gevent", "numpy", "pandas", "opentelemetry"},
    "loadgen.prepare": {"locust", "gevent", "numpy", "pandas", "opentelemetry"},
    "loadgen.lifecycle": {"locust", "gevent", "numpy", "pandas", "opentelemetry"},
    "loadgen.tiers": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.diagnose": {"locust", "gevent", "numpy", "pandas"},
    "records": {"locust", "gevent", "numpy", "pandas", "pyarrow"},
    "records.writer": {"locust", "gevent", "numpy", "pandas", "pydantic", "yaml"},
    "studies": {"locust", "gevent"},
    # pure planning: probe plans, dry runs, sweep/study scaling
    "loadgen.probes": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.dryrun": {"locust", "gevent", "numpy", "pandas"},
    "studies.sweep": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.endpoint": {"locust", "gevent", "numpy", "pandas", "pydantic", "httptools"},
    "rushhour.cli": {"locust", "gevent", "numpy", "pandas", "aiohttp", "opentelemetry"},
    "rushhour": {"locust", "gevent"},
    # the simulator: the testbed's model without its server, loadgen's workload without the Locust child
    "sim.run": {"locust", "gevent", "pandas", "aiohttp"},
}


def _loaded_layers(modules: Iterable[str]) -> set[str]:
    """The layers and third-party packages loaded, by name (``rushhour.audit.x`` is ``audit``; the bare ``rushhour``
    package, the namespace every subpackage is imported through, is no layer's code)."""
    return {layer_name(m).split(".")[0] for m in modules if m != "rushhour"}


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_import_does_not_load_forbidden_modules(module: str) -> None:
    name = module if module.startswith("rushhour") else f"rushhour.{module}"
    code = (
        "import importlib, sys, json\n"
        f"importlib.import_module({name!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded = _loaded_layers(json.loads(result.stdout))
    assert not (FORBIDDEN[module] & loaded), f"{module} loads {sorted(FORBIDDEN[module] & loaded)}"


def test_pure_planning_runs_without_gevent(tmp_path: Path) -> None:
    """A dry run, the probes' plan and a sweep's scaling, run (not only imported): no gevent."""
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from rushhour.loadgen.runner import RunOptions, run_scenario\n"
        "from rushhour.loadgen.probes import probe_plan, probe_scenario\n"
        "from rushhour.studies.sweep import plan_sweep, scaled_scenario\n"
        "from rushhour.scenarios import load_scenario\n"
        "sc = load_scenario('demo')\n"
        "assert run_scenario('demo', RunOptions(dry_run=True)).exit_code == 0\n"
        "probe_scenario(sc); probe_plan(sc)\n"
        f"plan_sweep(sc, [0.5, 1.0], out_dir=Path({str(tmp_path)!r})); scaled_scenario(sc, 2.0)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    loaded = _loaded_layers(json.loads(result.stdout.splitlines()[-1]))
    assert not ({"gevent", "locust"} & loaded), sorted({"gevent", "locust"} & loaded)
