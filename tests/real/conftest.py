"""Real vLLM and LiteLLM servers for the ``real`` tests (engines/install.sh installs, engines/serve.py starts).

A missing engine is an error, not a skip: ``make test`` installs them first. Only with
``RUSHHOUR_SKIP_REAL=1`` are these tests skipped, loudly.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_serve() -> ModuleType:
    # engines/ is a folder of scripts, not a package of rushhour: load serve.py by its path.
    spec = importlib.util.spec_from_file_location("rushhour_engines_serve", ROOT / "engines" / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


serve = _load_serve()
SKIP = os.environ.get("RUSHHOUR_SKIP_REAL") == "1"


# The engines the real tests use, by fixture name. They are started together, at the first test that needs
# one, and only those the selected tests ask for: a vLLM start is ~40 s of one core (three processes import
# torch in turn), so four one after another cost ~160 s of the real pass, and four at once on both cores
# are ready in ~85 s. They fall in two groups: the pinned vLLM (marker `pinned_vllm`: its tests) and the
# others. `make test` runs the two groups as two pytest processes at once, each starting only its own engines:
# a real test after the engine start takes ~90 % of one core of the two (load generator and engine together),
# so the groups fit side by side. Each group's vLLMs are pinned to a core of their own once they answer (a
# server started alone is from its start), so neither group's load runs on the other's engine core.
PINNED_VLLM = "vllm_server"
SERVES_ON = {"pinned": 1, "others": 0}


def gateway_proxy(engine: object, logs: Path) -> object:
    """The gateway's LiteLLM proxy, routing to ``engine`` with ample slots per tier."""
    return serve.start_litellm(
        deployment=serve.LitellmDeployment(max_parallel_requests=200, upstream=engine.url),  # type: ignore[attr-defined]
        tiers={t: {"max_parallel_requests": 200, "rpm_limit": None} for t in ("interactive", "batch")},
        log_dir=logs)


def _gateway(logs: Path) -> list[object]:
    """vLLM with one sequence at a time (so order shows), and LiteLLM routing to it with ample slots.

    A list, [engine, proxy]: a test may put a fresh proxy in place of one that crashed (LiteLLM's own SIGSEGV),
    and the pool stops whichever runs at the end."""
    limits = serve.VllmLimits(max_num_seqs=1, max_num_queued_reqs=6, max_num_queued_tokens=3000)
    engine = serve.start_vllm(limits=limits, log_dir=logs / "gw-vllm", cpu=SERVES_ON["others"],
                              pin_when_ready=True)
    try:
        proxy = gateway_proxy(engine, logs / "gw-litellm")
    except BaseException:
        engine.stop()
        raise
    return [engine, proxy]


ENGINES: dict[str, tuple[str, Callable[[Path], object]]] = {
    "vllm_server": ("vLLM 0.32 on one core: tiny Llama, priority scheduling, both admission limits.",
                    lambda logs: serve.start_vllm(log_dir=logs / "vllm", cpu=SERVES_ON["pinned"],
                                                pin_when_ready=True)),
    # one server for two jobs: the parser changes nothing for a request that offers no tools, and a vLLM start
    # less is ~40 s of CPU and ~1 GB less in the real pass
    "fcfs_vllm": ("The same vLLM with first-come-first-served scheduling (vLLM's default: the null case) and the "
                  "hermes tool-call parser (vllm_server refuses tools).",
                  lambda logs: serve.start_vllm(log_dir=logs / "vllm-fcfs", scheduling="fcfs",
                                                cpu=SERVES_ON["others"],
                                                tool_call_parser="hermes", pin_when_ready=True)),
    "gateway": ("(vLLM with one sequence at a time, LiteLLM routing to it with ample slots).", _gateway),
    "litellm_server": ("LiteLLM proxy: a mock deployment with 6 slots, per-key tiers (batch: 3 parallel, 120 rpm).",
                       lambda logs: serve.start_litellm(log_dir=logs / "litellm")),
}


# The release matrix (engines/releases.toml): the pinned releases are the engines above; each extra release
# runs only the classification and counter tests, through the ``vllm_release`` / ``litellm_release`` fixtures
# (one test id per release, e.g. ``[vllm-0.31.0]``, marker ``extra_release``), on a server of its own started
# like its pinned twin (``vllm_server``, ``litellm_server``). A broken release file fails the collection.
RELEASES = serve.releases.load()
RELEASE_TWIN = {"vllm": "vllm_server", "litellm": "litellm_server"}  # the pinned engine each release stands in for


def _release_engine(name: str) -> str:
    """The ENGINES key serving release ``name``: the pinned twin itself, or ``<twin>[<release>]``."""
    release = serve.releases.find(name, RELEASES)
    twin = RELEASE_TWIN[release.engine]
    return twin if release.pinned else f"{twin}[{release.name}]"


def pinned_release(name: str) -> bool:
    """Whether release ``name`` is its engine's pinned one (served by the pinned twin itself)."""
    return serve.releases.find(name, RELEASES).pinned


def _start_release(name: str) -> Callable[[Path], object]:
    """A start like the pinned twin's (vllm_server, litellm_server), on release ``name``."""
    if name.startswith("vllm-"):
        return lambda logs: serve.start_vllm(log_dir=logs / name, cpu=SERVES_ON["others"],
                                             pin_when_ready=True, release_name=name)
    return lambda logs: serve.start_litellm(log_dir=logs / name, release_name=name)


for _release in RELEASES:
    if not _release.pinned:
        ENGINES[_release_engine(_release.name)] = (
            f"{RELEASE_TWIN[_release.engine]} on the extra release {_release.name}.", _start_release(_release.name))


def _release_params(engine: str) -> list[object]:
    return [pytest.param(r.name, id=r.name, marks=() if r.pinned else (pytest.mark.extra_release,))
            for r in RELEASES if r.engine == engine]


_WANTED: set[str] = set()  # the engines the selected tests use (filled when collection is final)


def engines_of(item: pytest.Item) -> set[str]:
    """The ENGINES keys a test uses: its engine fixtures (direct or through another fixture) and releases."""
    names = {name for name in getattr(item, "fixturenames", ()) if name in ENGINES}
    params = getattr(getattr(item, "callspec", None), "params", {})
    names.update(_release_engine(params[f"{engine}_release"]) for engine in RELEASE_TWIN
                 if f"{engine}_release" in params)
    return names


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    real = []
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            real.append(item)
            item.add_marker(pytest.mark.real)
            engines = engines_of(item)
            if PINNED_VLLM in engines:
                if len(engines) > 1:  # the two groups' processes would each start it
                    raise pytest.UsageError(f"{item.nodeid} uses the pinned vLLM and other engines: {sorted(engines)}")
                item.add_marker(pytest.mark.pinned_vllm)
            if SKIP:
                item.add_marker(pytest.mark.skip(
                    reason="RUSHHOUR_SKIP_REAL=1: the audit was NOT checked against real vLLM/LiteLLM"))
    # the real tests last, in their order: the engines (idle ones take ~1.5 % of a core each, and GBs) then
    # run beside no other test until the session ends and stops them
    chosen = set(real)
    others = [item for item in items if item not in chosen]
    items[:] = others + real


def pytest_collection_finish(session: pytest.Session) -> None:
    # after -k/-m deselection and every plugin's reordering: only what will run
    for item in session.items:
        _WANTED.update(engines_of(item))


def _servers(value: object) -> list[object]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


class EnginePool:
    """The wanted engines, each starting in a thread of its own from the pool's creation; stopped by PID at the end."""

    def __init__(self, wanted: set[str], logs: Path) -> None:
        self._threads = ThreadPoolExecutor(max_workers=max(1, len(wanted)), thread_name_prefix="engine-start")
        self._starting: dict[str, Future[object]] = {
            name: self._threads.submit(ENGINES[name][1], logs) for name in sorted(wanted)}

    def get(self, name: str) -> object:
        """The running engine (waiting for its start), or the test fails with the engine's one-line error."""
        future = self._starting.get(name)
        if future is None:  # not foreseen at collection (a test asking for it by request.getfixturevalue)
            raise AssertionError(f"the engine {name!r} was not started: no collected test asked for it")
        try:
            return future.result()
        except serve.EngineError as exc:
            pytest.fail(f"real engine unavailable: {exc} (run `make engines`, or set RUSHHOUR_SKIP_REAL=1 to skip)",
                        pytrace=False)

    def stop(self) -> None:
        """Stop every engine that started (a start still under way is waited for, then stopped)."""
        self._threads.shutdown(wait=True)
        failed: list[BaseException] = []
        for future in self._starting.values():
            if future.exception() is None:
                for server in _servers(future.result()):
                    try:
                        server.stop()  # type: ignore[attr-defined]
                    except Exception as exc:  # the others are stopped all the same
                        failed.append(exc)
        if failed:
            raise failed[0]


@pytest.fixture(scope="session")
def engine_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnginePool]:
    """Every engine the selected tests use, starting at once (see ENGINES)."""
    pool = EnginePool(_WANTED, tmp_path_factory.mktemp("engine-logs"))
    yield pool
    pool.stop()


def _engine_fixture(name: str) -> object:
    """A session fixture named ``name``: the pool's engine of that name (its docstring is the engine's line)."""

    def fixture(engine_pool: EnginePool) -> object:
        return engine_pool.get(name)

    fixture.__doc__ = ENGINES[name][0]
    return pytest.fixture(scope="session", name=name)(fixture)


# vllm_server, fcfs_vllm, gateway, litellm_server: one fixture per engine, as the tests name them
# (the extra releases' engines are reached through the release fixtures below)
for _name in ENGINES:
    if _name.isidentifier():
        globals()[_name] = _engine_fixture(_name)


@pytest.fixture(scope="session", params=_release_params("vllm"))
def vllm_release(request: pytest.FixtureRequest, engine_pool: EnginePool) -> object:
    """vllm_server on each vLLM release in engines/releases.toml (the pinned one is vllm_server itself)."""
    return engine_pool.get(_release_engine(request.param))


@pytest.fixture(scope="session", params=_release_params("litellm"))
def litellm_release(request: pytest.FixtureRequest, engine_pool: EnginePool) -> object:
    """litellm_server on each LiteLLM release in engines/releases.toml (the pinned one is litellm_server itself)."""
    return engine_pool.get(_release_engine(request.param))


@pytest.fixture(scope="session")
def saturated_vllm_run(vllm_server: object, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, ...]:
    """One saturating run (scenarios/vllm-saturate.yaml) on vllm_server between two settled scrapes of its
    counters: (before, summary, after). Shared: test_vllm_real compares its counts with vLLM's own, and
    test_br02_real writes its run folder as BR0.2 (a two-tier run on vLLM 0.32 with usage on every answer, as
    that test needs, and with rejections too), so the pinned vLLM is saturated once, not once per test."""
    from .helpers import SCENARIOS, counted_run  # helpers import nothing from here; loaded when first used

    return counted_run(vllm_server, SCENARIOS / "vllm-saturate.yaml", tmp_path_factory.mktemp("saturated") / "runs")
