"""Real vLLM and LiteLLM servers for the ``real`` tests (engines/install.sh installs, engines/serve.py starts).

A missing engine is an error, not a skip: ``make test`` installs them first. Only with
``RUSHHOUR_SKIP_REAL=1`` are these tests skipped, loudly.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.real)
            if SKIP:
                item.add_marker(pytest.mark.skip(
                    reason="RUSHHOUR_SKIP_REAL=1: the audit was NOT checked against real vLLM/LiteLLM"))


def _start(starter: str, **kwargs: object) -> object:
    try:
        return getattr(serve, starter)(**kwargs)
    except serve.EngineError as exc:
        pytest.fail(f"real engine unavailable: {exc} (run `make engines`, or set RUSHHOUR_SKIP_REAL=1 to skip)",
                    pytrace=False)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """vLLM 0.32 on one core: tiny Llama, priority scheduling, both admission limits."""
    server = _start("start_vllm", log_dir=tmp_path_factory.mktemp("vllm-log"))
    yield server
    server.stop()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def litellm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """LiteLLM proxy: a mock deployment with 6 slots, per-key tiers (batch: 3 parallel, 120 rpm)."""
    server = _start("start_litellm", log_dir=tmp_path_factory.mktemp("litellm-log"))
    yield server
    server.stop()  # type: ignore[attr-defined]
