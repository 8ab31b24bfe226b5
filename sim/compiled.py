"""The simulator's compiled build: its hot modules compiled with mypyc, for the processes that run the simulator.

The simulator is the same Python as the testbed and the personas, so its speed is the interpreter's. mypyc
(part of mypy) compiles those modules to C extensions that run the same code 1.2–1.5× faster (docs/capacity.md).
The build lives in the venv (``<venv>/rushhour-compiled/<digest>/``), never next to the sources, and is used
only by a process started with ``RUSHHOUR_COMPILED=1`` (``rushhour simulate``, ``plan`` and the simulated
``sweep``/``study`` restart themselves so) and only while it matches the sources byte for byte: any edit makes
it stale, and a stale or missing build means the interpreted modules, never old code. Everything else (tests,
real runs, the audit) imports the sources as they are.
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
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ENV = "RUSHHOUR_COMPILED"
# The folder holding the `rushhour` package (a checkout's root, or site-packages): this file is rushhour/sim/compiled.py
# (unresolved: in a checkout rushhour/sim is a symlink to sim/, and the modules are compiled under their rushhour names)
ROOT = Path(__file__).absolute().parents[2]
BUILD_ROOT = Path(sys.prefix) / "rushhour-compiled"
PTH_NAME = "rushhour-compiled.pth"
# Armed at interpreter start-up, before anything imports a module of the build (a compiled class cannot mix
# with its interpreted base); a no-op unless the variable asks for it.
PTH_LINE = (f"import os; os.environ.get({ENV!r}) == '1' and "
            "__import__('rushhour.sim.compiled').sim.compiled.install()\n")

# The simulator's hot path: the testbed's stack model, the loop and cluster, the personas' flows, the records.
MODULES = (
    "rushhour.sim.client", "rushhour.sim.cluster", "rushhour.sim.driver", "rushhour.sim.loop",
    "rushhour.sim.personas", "rushhour.sim.prompt", "rushhour.sim.ticks", "rushhour.testbed.clock",
    "rushhour.testbed.engine", "rushhour.testbed.faults", "rushhour.testbed.flow", "rushhour.testbed.job",
    "rushhour.testbed.policies", "rushhour.testbed.prefix_cache", "rushhour.testbed.prefix_hash",
    "rushhour.testbed.profiles", "rushhour.testbed.stack", "rushhour.testbed.tokens",
    "rushhour.loadgen.flow.agents", "rushhour.loadgen.flow.chat", "rushhour.loadgen.flow.protocol",
    "rushhour.loadgen.flow.send", "rushhour.loadgen.prompts", "rushhour.records.schema", "rushhour.records.redact",
    "rushhour.records.writer",
    "rushhour.loadgen.resilience", "rushhour.loadgen.schedule", "rushhour.loadgen.workload",
)

# How anyone gets a build: a pip user has no Makefile (`make compile` runs this too)
BUILD_COMMAND = "python -m rushhour.sim.compiled build"

_active = False


def source(module: str) -> Path:
    """The source file of one module of the build."""
    return ROOT / (module.replace(".", "/") + ".py")


def digest(modules: Sequence[str] = MODULES) -> str:
    """What a build is of: the modules' sources, the compiler's version and the interpreter's ABI."""
    h = hashlib.sha256()
    h.update(f"{_mypy_version()}|{sysconfig.get_config_var('SOABI')}|{sys.version}".encode())
    for module in modules:
        h.update(module.encode() + b"\0" + source(module).read_bytes() + b"\0")
    return h.hexdigest()[:20]


def compiler_requirement() -> str:
    """The pinned compiler as rushhour's own metadata names it (its ``dev`` extra), e.g. ``mypy==2.4.1``."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        wanted = requires("rushhour") or []
    except PackageNotFoundError:
        wanted = []
    pins = [spec.split(";")[0].strip() for spec in wanted if spec.replace(" ", "").startswith("mypy==")]
    return pins[0] if pins else "mypy"


def _missing_tools() -> list[str]:
    """What a build needs and this interpreter lacks: mypyc (part of mypy) and setuptools."""
    return [name for module, name in (("mypyc", compiler_requirement()), ("setuptools", "setuptools"))
            if importlib.util.find_spec(module) is None]


def _mypy_version() -> str:
    try:
        from importlib.metadata import version

        return version("mypy")
    except Exception:  # no mypy: no build can be made, and none matches
        return "none"


def manifest() -> dict[str, str] | None:
    """The current build's modules and their extension files, or None when there is no build for these sources."""
    try:  # digest() too: a module imported by its old top-level name (a venv's .pth from before) finds no sources
        data = json.loads((BUILD_ROOT / digest() / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    files: dict[str, str] = data.get("files", {})
    if set(MODULES) - set(files) or not all(Path(f).is_file() for f in files.values()):
        return None
    return files


def status() -> str:
    """One line: whether this process runs the compiled build, and if not, why."""
    if _active:
        return "compiled (mypyc)"
    if os.environ.get(ENV) == "0":
        return "interpreted (RUSHHOUR_COMPILED=0)"
    if manifest() is None:
        return f"interpreted (no compiled build of these sources: `{BUILD_COMMAND}`)"
    return "interpreted"


def active() -> bool:
    """True when this process imported the compiled build."""
    return _active


class _Finder(importlib.abc.MetaPathFinder):
    """Imports the build's modules from their extension files, everything else as usual."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, file, loader=importlib.machinery.ExtensionFileLoader(fullname, file))


def install() -> bool:
    """Import the build's modules compiled from now on (True), when a build matches the sources; else nothing."""
    global _active
    if _active:
        return True
    if any(m in sys.modules for m in MODULES):  # too late: their interpreted classes are in use
        return False
    files = manifest()
    if files is None:
        return False
    sys.meta_path.insert(0, _Finder(files))
    _active = True
    return True


def wanted(argv: Sequence[str]) -> bool:
    """True for a command line that runs the simulator (``simulate``, ``plan``, a simulated sweep or study)."""
    words = [a for a in argv if not a.startswith("-")]
    verb = words[0] if words else ""
    return verb in ("simulate", "plan") or (verb in ("sweep", "study") and "--simulate" in argv)


def reexec_compiled(argv: Sequence[str], debug: bool = False) -> None:
    """Start this command again compiled (the same PID: ``exec``) when it runs the simulator and a build matches;
    otherwise return and run interpreted. ``RUSHHOUR_COMPILED=0`` keeps it interpreted."""
    if os.environ.get(ENV) is not None or not wanted(argv) or manifest() is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, ENV: "1"}
    os.execve(sys.executable, [sys.executable, "-m", "rushhour.cli", *argv, *(["--debug"] if debug else [])], env)


# ---- the build ------------------------------------------------------------------------------


def _pth_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / PTH_NAME


def build(quiet: bool = False) -> Path:
    """Compile the modules with mypyc into the venv (a no-op when the build of these sources is there); its folder."""
    needed = _missing_tools()
    if needed:
        raise RuntimeError(f"it needs {' and '.join(needed)}: `pip install {' '.join(needed)}`, then "
                           f"`{BUILD_COMMAND}` again")
    key = digest()
    out = BUILD_ROOT / key
    _pth_path().write_text(PTH_LINE)
    if manifest() is not None:
        return out
    BUILD_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rushhour-mypyc-", dir=BUILD_ROOT) as tmp:
        work = Path(tmp)
        setup = work / "setup.py"
        paths = [str(source(m)) for m in MODULES]
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
        missing = set(MODULES) - set(files)
        if missing:
            raise RuntimeError(f"mypyc built no extension for {', '.join(sorted(missing))}")
        (staged / "manifest.json").write_text(json.dumps({"digest": key, "files": files}, indent=1))
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    for old in BUILD_ROOT.iterdir():  # earlier builds of other sources
        if old != out and old.is_dir() and not old.name.startswith("rushhour-mypyc-"):
            shutil.rmtree(old, ignore_errors=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rushhour.sim.compiled [build|status]``."""
    args = list(sys.argv[1:] if argv is None else argv) or ["status"]
    if args[0] == "build":
        try:
            out = build(quiet="--quiet" in args)
        except (RuntimeError, OSError) as exc:
            print(f"rushhour: compiled build skipped ({exc}); the simulator runs interpreted", file=sys.stderr)
            return 0 if "--best-effort" in args else 1
        print(f"rushhour: compiled build of the simulator in {out}")
        return 0
    if args[0] == "status":
        print("rushhour simulator:", "compiled build ready" if manifest() is not None else status())
        return 0
    print("usage: python -m rushhour.sim.compiled [build [--quiet] [--best-effort] | status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
