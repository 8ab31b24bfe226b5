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

import importlib.util  # noqa: F401 - the build's tool check looks through it (tests patch it here)
import os
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from rushhour.loadgen import compiled as builds

ENV = builds.ENV
ROOT = builds.ROOT
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


def source(module: str) -> Path:
    """The source file of one module of the build."""
    return builds.source(module)


# the one build machinery (loadgen/compiled.py); sources looked up through this module's ``source``
SIM = builds.CompiledSet("the simulator", MODULES, BUILD_ROOT, BUILD_COMMAND, source_of=lambda m: source(m))


def digest(modules: Sequence[str] = MODULES) -> str:
    """What a build is of: the modules' sources, the compiler's version and the interpreter's ABI."""
    return SIM.digest() if tuple(modules) == MODULES else builds.CompiledSet(
        SIM.what, modules, BUILD_ROOT, BUILD_COMMAND, source_of=SIM.source_of).digest()


def compiler_requirement() -> str:
    """The pinned compiler as rushhour's own metadata names it (its ``dev`` extra), e.g. ``mypy==2.4.1``."""
    return builds.compiler_requirement()


def manifest() -> dict[str, str] | None:
    """The current build's modules and their extension files, or None when there is no build for these sources."""
    return SIM.manifest()


def status() -> str:
    """One line: whether this process runs the compiled build, and if not, why."""
    return SIM.status(ready=manifest() is not None)


def active() -> bool:
    """True when this process imported the compiled build."""
    return SIM.active


def install() -> bool:
    """Import the build's modules compiled from now on (True), when a build matches the sources; else nothing."""
    return SIM.install()


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
    if not builds.missing_tools():
        _pth_path().write_text(PTH_LINE)
    return SIM.build(quiet)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rushhour.sim.compiled [build|status]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["build"] and not builds.missing_tools():
        _pth_path().write_text(PTH_LINE)
    return SIM.main(args)


if __name__ == "__main__":
    sys.exit(main())
