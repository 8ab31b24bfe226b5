"""A repository script (engines/, benchmarks/, tools/: folders of scripts, not packages) loaded by its path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from support.cli import REPO


def load_script(path: Path | str, name: str | None = None) -> ModuleType:
    """The module ``path`` (relative to the checkout, or absolute) executed afresh and registered under ``name``.

    Registered in sys.modules before it runs: dataclasses and pickling look a class's module up there. The
    default name is the path's, prefixed (``engines/serve.py`` → ``rushhour_script_engines_serve``) so that it
    can shadow no real module."""
    full = REPO / path
    if name is None:
        stem = full.relative_to(REPO).with_suffix("") if full.is_relative_to(REPO) else Path(full.stem)
        name = "rushhour_script_" + "_".join(stem.parts)
    spec = importlib.util.spec_from_file_location(name, full)
    assert spec is not None and spec.loader is not None, f"not a Python script: {full}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
