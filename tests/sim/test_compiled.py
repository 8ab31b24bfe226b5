"""The simulator's compiled build (``sim/compiled.py``): the same records byte for byte, and only where asked.

The build is made here if it is missing or stale (≈ 75 s; ``make test`` makes it before the suite). Without a C
compiler there can be no build: then these tests are skipped, saying why, and the simulator runs interpreted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_pinned import CASES, LLMD_CONFIG, SCENARIO  # tests/sim is on the path (conftest.py)

from rushhour.sim import compiled

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                reason="no C compiler: the simulator runs interpreted")

ROOT = Path(__file__).resolve().parents[2]

# In a process started with RUSHHOUR_COMPILED=1: the pinned scenario's digest, and where its modules came from.
CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
import test_pinned
import rushhour.sim.cluster  # noqa: F401 - loads it; used as sim.cluster
from rushhour import sim
import rushhour.testbed.engine  # noqa: F401 - loads it; used as testbed.engine
from rushhour import testbed
from rushhour.records import schema
from rushhour.sim import compiled
lines, sha = test_pinned.digest(sys.argv[1], Path(sys.argv[2]))
print(json.dumps({"lines": lines, "sha": sha, "status": compiled.status(),
                  "files": [sim.cluster.__file__, testbed.engine.__file__, schema.__file__]}))
"""


@pytest.fixture(scope="module")
def build() -> Path:
    return compiled.build(quiet=True)


def _env(value: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != compiled.ENV}
    if value is not None:
        env[compiled.ENV] = value
    return env


@pytest.mark.parametrize("profile", sorted(CASES))
def test_the_compiled_simulator_writes_the_pinned_records(build: Path, tmp_path: Path, profile: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, profile, str(tmp_path), str(ROOT / "tests" / "sim")],
                          capture_output=True, text=True, env=_env("1"), cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["status"] == "compiled (mypyc)"
    assert all(f.startswith(str(build)) and f.endswith(".so") for f in got["files"]), got["files"]
    assert (got["lines"], got["sha"]) == CASES[profile]


def test_simulate_restarts_compiled_and_says_so(build: Path, tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(profile="llm-d", config=LLMD_CONFIG))
    rushhour = str(Path(sys.executable).with_name("rushhour"))
    for value, want in ((None, "compiled (mypyc)"), ("0", "interpreted (RUSHHOUR_COMPILED=0)")):
        out = tmp_path / f"runs-{value}"
        done = subprocess.run([rushhour, "simulate", str(path), "--out", str(out), "--no-report"],
                              capture_output=True, text=True, env=_env(value), timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        assert want in done.stdout + done.stderr
        run_json = json.loads(next(out.glob("*/run.json")).read_text())
        assert run_json["simulation"]["code"] == want


def test_a_source_edit_makes_the_build_stale(build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # any byte of any compiled module's source changes the digest: the old build is not found, so not used
    assert compiled.manifest() is not None
    edited = tmp_path / "engine.py"
    edited.write_bytes(compiled.source("rushhour.testbed.engine").read_bytes() + b"\n# edited\n")
    real = compiled.source
    monkeypatch.setattr(compiled, "source", lambda m: edited if m == "rushhour.testbed.engine" else real(m))
    assert compiled.manifest() is None
    assert compiled.status().startswith("interpreted (no compiled build")


def test_interpreted_by_default() -> None:
    # this process (the test suite) was not asked for the build: the sources as they are
    import rushhour.sim.cluster  # noqa: F401 - loads it; used as sim.cluster
    from rushhour import sim

    assert sim.cluster.__file__ is not None and sim.cluster.__file__.endswith("cluster.py")
    assert not compiled.active()
