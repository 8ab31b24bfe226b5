"""rushhour's compiled builds: a set of hot modules compiled with mypyc, used only while it matches the sources.

Two sets use it: the simulator's (``sim/compiled.py``) and the load generator's wire client (``WIRE`` here). A
build is the same Python compiled to C extensions by mypyc (part of mypy, pinned in pyproject's ``dev`` extra). It
lives in the venv (``<venv>/<set's folder>/<digest>/``), never next to the sources, under a digest of every
module's source, the compiler's version and the interpreter's ABI: any edit makes it stale, and a stale or missing
build means the interpreted modules, never old code. Which processes load a set is the set's rule: the simulator
only when asked (``RUSHHOUR_COMPILED=1``), the wire client in every load process unless ``RUSHHOUR_COMPILED=0``.
Standard library only (the parent side imports it; the load processes install it before any wire module loads).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

ENV = "RUSHHOUR_COMPILED"
# The folder holding the `rushhour` package (a checkout's root, or site-packages): this file is
# rushhour/loadgen/compiled.py (unresolved: in a checkout rushhour/loadgen is a symlink to loadgen/, and the
# modules are compiled under their rushhour names)
ROOT = Path(__file__).absolute().parents[2]
KEEP_BUILDS = 4  # builds of other sources kept beside the newest: worktrees sharing one venv each keep theirs
STAGING_PREFIX = "rushhour-mypyc-"

# The load generator's hot path (profile: docs/loadgen.md): the receive reactor, the HTTP and SSE parse, the
# stream's interpretation and the attempt's record filling.
WIRE_MODULES = (
    "rushhour.loadgen.engine.wire.http", "rushhour.loadgen.engine.wire.sse", "rushhour.loadgen.engine.wire.stream",
    "rushhour.loadgen.engine.wire.reactor", "rushhour.loadgen.engine.wire.client",
)


def source(module: str) -> Path:
    """The source file of one module."""
    return ROOT / (module.replace(".", "/") + ".py")


def compiler_requirement() -> str:
    """The pinned compiler as rushhour's own metadata names it (its ``dev`` extra), e.g. ``mypy==2.4.1``."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        wanted = requires("rushhour") or []
    except PackageNotFoundError:
        wanted = []
    pins = [spec.split(";")[0].strip() for spec in wanted if spec.replace(" ", "").startswith("mypy==")]
    return pins[0] if pins else "mypy"


def missing_tools() -> list[str]:
    """What a build needs and this interpreter lacks: mypyc (part of mypy) and setuptools."""
    return [name for module, name in (("mypyc", compiler_requirement()), ("setuptools", "setuptools"))
            if importlib.util.find_spec(module) is None]


def mypy_version() -> str:
    try:
        from importlib.metadata import version

        return version("mypy")
    except Exception:  # no mypy: no build can be made, and none matches
        return "none"


class _Finder(importlib.abc.MetaPathFinder):
    """Imports a build's modules from their extension files, everything else as usual."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, file, loader=importlib.machinery.ExtensionFileLoader(fullname, file))


class CompiledSet:
    """One set of modules compiled together: its build, whether it matches the sources, and its import hook."""

    def __init__(self, what: str, modules: Sequence[str], root: Path, command: str,
                 source_of: Callable[[str], Path] = source) -> None:
        self.what = what  # "the simulator": for the lines it prints
        self.modules = tuple(modules)
        self.root = root  # the builds' folder in the venv, one per set
        self.command = command  # how anyone (a pip user too: no Makefile) makes the build
        self.source_of = source_of
        self.active = False

    def digest(self) -> str:
        """What a build is of: the modules' sources, the compiler's version and the interpreter's ABI."""
        h = hashlib.sha256()
        h.update(f"{mypy_version()}|{sysconfig.get_config_var('SOABI')}|{sys.version}".encode())
        for module in self.modules:
            h.update(module.encode() + b"\0" + self.source_of(module).read_bytes() + b"\0")
        return h.hexdigest()[:20]

    def manifest(self) -> dict[str, str] | None:
        """The build's modules and their extension files, or None when there is no build of these sources."""
        try:  # digest() too: a module imported by its old top-level name (a venv's .pth from before) finds no sources
            data = json.loads((self.root / self.digest() / "manifest.json").read_text())
        except (OSError, ValueError):
            return None
        files: dict[str, str] = data.get("files", {})
        if set(self.modules) - set(files) or not all(Path(f).is_file() for f in files.values()):
            return None
        return files

    def status(self, ready: bool | None = None) -> str:
        """One line: whether this process runs the build, and if not, why (``ready``: a build matches, if known)."""
        if self.active:
            return "compiled (mypyc)"
        if os.environ.get(ENV) == "0":
            return f"interpreted ({ENV}=0)"
        if not (self.manifest() is not None if ready is None else ready):
            return f"interpreted (no compiled build of these sources: `{self.command}`)"
        return "interpreted"

    def install(self) -> bool:
        """Import the set's modules compiled from now on (True), when a build matches the sources; else nothing."""
        if self.active:
            return True
        if any(m in sys.modules for m in self.modules):  # too late: their interpreted classes are in use
            return False
        files = self.manifest()
        if files is None:
            return False
        sys.meta_path.insert(0, _Finder(files))
        self.active = True
        return True

    def build(self, quiet: bool = False) -> Path:
        """Compile the modules with mypyc into the venv (a no-op when the build of these sources is there)."""
        needed = missing_tools()
        if needed:
            raise RuntimeError(f"it needs {' and '.join(needed)}: `pip install {' '.join(needed)}`, then "
                               f"`{self.command}` again")
        key = self.digest()
        out = self.root / key
        if self.manifest() is not None:
            return out
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=STAGING_PREFIX, dir=self.root) as tmp:
            work = Path(tmp)
            setup = work / "setup.py"
            paths = [str(self.source_of(m)) for m in self.modules]
            setup.write_text(
                "from setuptools import setup\nfrom mypyc.build import mypycify\n"
                f"setup(name='rushhour-compiled', py_modules=[], ext_modules=mypycify({paths!r}, opt_level='3', "
                f"target_dir={str(work / 'c')!r}))\n")
            cmd = [sys.executable, str(setup), "-q", "build_ext", "--build-lib", str(work / "lib"),
                   "--build-temp", str(work / "tmp")]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=quiet, text=True)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout or "").strip().splitlines()[-5:] if quiet else []
                raise RuntimeError("mypyc failed" + (": " + " | ".join(tail) if tail else ""))
            staged = work / "build"
            shutil.copytree(work / "lib", staged)
            files = {}
            for so in staged.rglob("*" + sysconfig.get_config_var("EXT_SUFFIX")):
                rel = so.relative_to(staged)
                name = ".".join((*rel.parts[:-1], rel.name.split(".")[0]))
                files[name] = str(out / rel)
            missing = set(self.modules) - set(files)
            if missing:
                raise RuntimeError(f"mypyc built no extension for {', '.join(sorted(missing))}")
            (staged / "manifest.json").write_text(json.dumps({"digest": key, "files": files}, indent=1))
            if out.exists():
                shutil.rmtree(out)
            staged.rename(out)
        self._prune(out)
        return out

    def _prune(self, newest: Path) -> None:
        """Drop the oldest builds of other sources beyond KEEP_BUILDS (never one being staged)."""
        others = sorted((d for d in self.root.iterdir()
                         if d != newest and d.is_dir() and not d.name.startswith(STAGING_PREFIX)),
                        key=lambda d: d.stat().st_mtime, reverse=True)
        for old in others[KEEP_BUILDS:]:
            shutil.rmtree(old, ignore_errors=True)

    def main(self, argv: Sequence[str]) -> int:
        """``python -m <module> [build [--quiet] [--best-effort] | status]`` for this set."""
        args = list(argv) or ["status"]
        if args[0] == "build":
            try:
                out = self.build(quiet="--quiet" in args)
            except (RuntimeError, OSError) as exc:
                print(f"rushhour: compiled build skipped ({exc}); {self.what} runs interpreted", file=sys.stderr)
                return 0 if "--best-effort" in args else 1
            print(f"rushhour: compiled build of {self.what} in {out}")
            return 0
        if args[0] == "status":
            print(f"rushhour {self.what}:", "compiled build ready" if self.manifest() is not None else self.status())
            return 0
        print(f"usage: {self.command.replace(' build', '')} [build [--quiet] [--best-effort] | status]",
              file=sys.stderr)
        return 2


# The wire client's set: loaded by every process that imports the load generator's child package
# (loadgen/engine/__init__.py: `rushhour run`'s Locust processes, workers, a user's `locust -f`), unless
# RUSHHOUR_COMPILED=0; the records are the same either way (tests/loadgen/test_wire_compiled.py).
WIRE = CompiledSet("the load generator's wire client", WIRE_MODULES, Path(sys.prefix) / "rushhour-compiled-wire",
                   "python -m rushhour.loadgen.compiled build")


def install_wire() -> bool:
    """The load process's rule: the wire client compiled when a build matches, unless ``RUSHHOUR_COMPILED=0``."""
    if os.environ.get(ENV) == "0":
        return False
    try:
        return WIRE.install()
    except OSError:  # unreadable sources or build: the interpreted modules (status says no build)
        return False


def wire_status() -> str:
    """run.json's ``code``: how the wire client runs, compiled or interpreted and why: in this process when it
    loaded the wire client, else in the load processes it starts (they follow ``install_wire``'s rule)."""
    if WIRE.active or any(m in sys.modules for m in WIRE.modules):
        return WIRE.status()
    if os.environ.get(ENV) != "0" and WIRE.manifest() is not None:
        return "compiled (mypyc)"
    return WIRE.status(ready=False if os.environ.get(ENV) != "0" else None)


if __name__ == "__main__":
    sys.exit(WIRE.main(sys.argv[1:]))
