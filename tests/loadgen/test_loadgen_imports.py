"""The parent-side and pure modules never load locust/gevent (locust monkey-patches on import) or numpy/pandas."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = ["rushhour.loadgen." + name for name in (
    "runner", "tiers", "prompts", "schedule", "traces", "live", "testbed_proc", "probes", "endpoint", "dryrun",
    # the child's gevent-free parts (the wire's parsers), importable on their own
    "engine.wire.http", "engine.wire.sse", "engine.wire.stream", "engine.wire.dialects")] + [
    "rushhour.records.record", "rushhour.records.manifest", "rushhour.studies.sweep"]


@pytest.mark.parametrize("module", PURE)
def test_no_patching_imports(module: str) -> None:
    code = f"import importlib, sys, json; importlib.import_module({module!r}); print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = {m.split(".")[0] for m in json.loads(out.stdout)}
    assert not loaded & {"locust", "gevent", "numpy", "pandas"}


def test_the_locustfile_paths_point_at_the_child() -> None:
    """The runner and a remote worker start Locust on loadgen/engine/locustfile.py (moved in issue 13)."""
    from rushhour.loadgen import distributed, runner

    assert runner.LOCUSTFILE.is_file() and runner.LOCUSTFILE.parent.name == "engine"
    assert distributed.LOCUSTFILE == runner.LOCUSTFILE
