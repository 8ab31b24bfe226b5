"""Dependencies point one way; heavy or patching modules stay where DESIGN.md puts them."""

from __future__ import annotations

import subprocess
import sys

import pytest

# rushhour's own packages and the third-party ones: ``stacks`` is the bottom layer and imports none
OWN = {"scenarios", "loadgen", "testbed", "audit", "reports", "rushhour"}
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
    "loadgen.runner": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.tiers": {"locust", "gevent", "numpy", "pandas"},
    "loadgen.diagnose": {"locust", "gevent", "numpy", "pandas"},
    "rushhour.cli": {"locust", "gevent", "numpy", "pandas", "aiohttp"},
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
    loaded = set(__import__("json").loads(result.stdout))
    assert not (FORBIDDEN[module] & loaded), f"{module} loads {sorted(FORBIDDEN[module] & loaded)}"
