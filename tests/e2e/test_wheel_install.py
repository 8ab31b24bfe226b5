"""A pip user's path: the built wheel in a fresh venv outside the checkout runs the README's commands.

The venv is cached under ``~/.cache/rushhour/wheel-venv-<hash of the dependencies>`` (its dependencies come
from the machine's configured pip index, as a user's would); each run reinstalls only the rushhour wheel.
Nothing here may import from the checkout: the commands run from a scratch folder with PYTHONPATH unset.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

from .locust_helpers import locust_until_chat_served, served_chat

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# one installed namespace: the wheel's only top-level name is rushhour (the checkout's folders are its subpackages)
SUBPACKAGES = ("stacks", "scenarios", "records", "loadgen", "testbed", "audit", "studies", "reports", "sim")
PACKAGES = (*(f"rushhour.{p}" for p in SUBPACKAGES), "rushhour")
CACHE = Path(os.environ.get("RUSHHOUR_WHEEL_VENV_CACHE", Path.home() / ".cache" / "rushhour"))


def _venv_dir() -> Path:
    """The cached venv of these dependencies and this interpreter (a change of either makes a new one)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    key = json.dumps([project["dependencies"], project["requires-python"], sys.version]).encode()
    return CACHE / f"wheel-venv-{hashlib.sha256(key).hexdigest()[:16]}"


def _check(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{cmd}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rushhour built as a user builds it: `pip wheel` of the checkout (hatchling from the configured index)."""
    out = tmp_path_factory.mktemp("wheel")
    _check([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)], timeout=300)
    (built,) = out.glob("rushhour-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path) -> Path:
    """A venv outside the checkout with the wheel installed (its dependencies installed once, then cached)."""
    home = _venv_dir()
    stamp = home / ".deps-installed"
    home.parent.mkdir(parents=True, exist_ok=True)
    with (home.parent / f"{home.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be installing into the same venv
        if not stamp.exists():  # a half-made venv (an interrupted first run) is made again
            shutil.rmtree(home, ignore_errors=True)
            _check([sys.executable, "-m", "venv", str(home)], timeout=300)
            _check([str(home / "bin" / "pip"), "install", "-q", str(wheel)], timeout=900, env=_user_env(home))
            stamp.write_text(wheel.name + "\n")
        else:
            _check([str(home / "bin" / "pip"), "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   timeout=300, env=_user_env(home))
    return home


def _user_env(venv: Path) -> dict[str, str]:
    """A user's shell: the venv's bin first on PATH, no PYTHONPATH, nothing of this test session."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "RUSHHOUR_COMPILED", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("COV_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    return env


def _sh(venv: Path, cwd: Path, *args: str, codes: tuple[int, ...] = (0,), timeout: float = 300
        ) -> subprocess.CompletedProcess[str]:
    """One of the README's commands in the user's shell, from the scratch folder; no traceback, ever."""
    done = subprocess.run([str(venv / "bin" / args[0]), *args[1:]], capture_output=True, text=True, cwd=cwd,
                          env=_user_env(venv), timeout=timeout)
    said = f"{' '.join(args)}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert done.returncode in codes, said
    assert "Traceback" not in done.stderr, said
    return done


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_wheel_carries_licence_notice_example_and_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for want in ("rushhour-0.1.0.dist-info/licenses/LICENSE", "rushhour-0.1.0.dist-info/licenses/NOTICE",
                 "rushhour/examples/locustfile.py", "rushhour/scenarios/library/demo.yaml",
                 "rushhour/reports/vendor/uplot/LICENSE", "rushhour/scenarios/traces/README.md",
                 "rushhour/scenarios/traces/LICENSE-APACHE-2.0.txt", "rushhour/scenarios/datasets/chat-mini.jsonl"):
        assert want in names, f"{want} is not in {wheel.name}"
    with zipfile.ZipFile(wheel) as z:
        assert z.read("rushhour/examples/locustfile.py") == (REPO / "examples" / "locustfile.py").read_bytes()
        assert z.read("rushhour-0.1.0.dist-info/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
        assert b"Apache License" in z.read("rushhour-0.1.0.dist-info/licenses/LICENSE")
        assert b"uPlot" in z.read("rushhour-0.1.0.dist-info/licenses/NOTICE")


def test_the_wheel_installs_one_top_level_name(wheel: Path) -> None:
    """Only `rushhour` (and its dist-info) at the top of site-packages: nothing to collide with another
    distribution's `audit` or `stacks`, nothing a user's folder of that name can shadow."""
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"rushhour", "rushhour-0.1.0.dist-info"}
    for sub in SUBPACKAGES:  # every package of the checkout, under the one name
        assert f"rushhour/{sub}/__init__.py" in names, sub
    with zipfile.ZipFile(wheel) as z:
        assert z.read("rushhour/audit/__init__.py") == (REPO / "audit" / "__init__.py").read_bytes()


def test_the_readme_pip_path_from_a_scratch_folder(venv: Path, tmp_path: Path) -> None:
    # the user's project folder holds their own `scenarios/` (YAML files) beside their locustfile: the wheel
    # installs a top-level package of that name, and `python -m …` (the Locust child) and Locust itself put the
    # working folder on sys.path, so the folder must not shadow it (a namespace folder loses to a package)
    scratch = tmp_path / "scratch"
    (scratch / "scenarios").mkdir(parents=True)
    # every package comes from the venv, none from the checkout
    where = _sh(venv, scratch, "python", "-c",
                f"import sys, importlib; print([importlib.import_module(p).__file__ for p in {PACKAGES!r}]); "
                "print(sys.path)").stdout.splitlines()
    files = eval(where[0])  # a list literal we printed ourselves
    assert not files[1].startswith(str(scratch)), "the user's scenarios/ folder shadowed rushhour's package"
    site = str(venv.resolve())
    assert all(str(Path(f).resolve()).startswith(site) for f in files), files
    assert not any(str(REPO) in p for p in eval(where[1])), where[1]

    # run (a short built-in), report, gate: the README's first screen
    (scratch / "scenarios" / "smoke.yaml").write_text(
        _sh(venv, scratch, "rushhour", "scenario", "show", "ci-smoke").stdout)
    done = _sh(venv, scratch, "rushhour", "run", "scenarios/smoke.yaml", "--duration", "12s", timeout=240)
    run_dir = Path(re.search(r"run folder: (\S+)", done.stdout).group(1))  # type: ignore[union-attr]
    run_dir = run_dir if run_dir.is_absolute() else scratch / run_dir
    assert (run_dir / "summary.json").is_file() and (run_dir / "report.html").is_file()
    assert str(run_dir.resolve()).startswith(str(scratch.resolve()))
    _sh(venv, scratch, "rushhour", "report", str(run_dir))
    gate = _sh(venv, scratch, "rushhour", "gate", str(run_dir), codes=(0, 1, 2))
    assert "interactive" in gate.stdout

    # virtual time: simulate says how a pip user gets the compiled build, and never to run make
    sim = _sh(venv, scratch, "rushhour", "simulate", "demo", "--duration", "20s", "--no-report", timeout=240)
    said = sim.stdout + sim.stderr
    assert "python -m rushhour.sim.compiled build" in said and "make" not in said, said
    _sh(venv, scratch, "rushhour", "plan", "ci-smoke", "--replicas", "1..2", "--scale", "1", "--duration", "15s",
        "--out", "plans", timeout=300)
    build = _sh(venv, scratch, "python", "-m", "rushhour.sim.compiled", "build", codes=(1,))  # no mypy in a user's venv
    assert "pip install mypy==" in build.stderr and len(build.stderr.strip().splitlines()) == 1, build.stderr

    # a built-in as a template; the schema; the example locustfile against the testbed
    (scratch / "scenarios" / "mine.yaml").write_text(_sh(venv, scratch, "rushhour", "scenario", "show", "demo").stdout)
    _sh(venv, scratch, "rushhour", "scenario", "check", "scenarios/mine.yaml")
    assert json.loads(_sh(venv, scratch, "rushhour", "schema", "summary").stdout)["title"] == "rushhour summary.json"
    (scratch / "locustfile.py").write_text(_sh(venv, scratch, "rushhour", "example", "locustfile").stdout)
    _run_example_locustfile(venv, scratch)


def test_a_users_modules_named_like_rushhours_packages(venv: Path, tmp_path: Path) -> None:
    """A user's own stacks.py and scenarios/ package beside their locustfile shadow nothing of rushhour's:
    `rushhour run` (its Locust children start with `python -m` from that folder) and the user's locustfile under
    plain `locust` run, and the old top-level names are not importable from the wheel."""
    project = tmp_path / "project"
    (project / "scenarios").mkdir(parents=True)
    (project / "stacks.py").write_text("STACKS = ['my own notes']\n")
    (project / "scenarios" / "__init__.py").write_text("MINE = True\n")  # a package, not only a folder of YAML
    done = _sh(venv, project, "rushhour", "run", "ci-smoke", "--duration", "5s", "--no-report", timeout=240)
    assert "error:" not in done.stderr, done.stderr[-2000:]
    where = _sh(venv, project, "python", "-c", "import stacks, scenarios, rushhour.stacks; "
                "print(stacks.STACKS, scenarios.MINE, rushhour.stacks.__file__)").stdout
    assert where.startswith("['my own notes'] True ") and str(project) not in where.split()[-1], where
    for old in SUBPACKAGES:
        if old not in ("stacks", "scenarios"):  # the user's own, above
            gone = subprocess.run([str(venv / "bin" / "python"), "-c", f"import {old}"], capture_output=True,
                                  text=True, cwd=project, env=_user_env(venv), timeout=60)
            assert gone.returncode == 1 and f"No module named '{old}'" in gone.stderr, gone.stderr
    (project / "locustfile.py").write_text(_sh(venv, project, "rushhour", "example", "locustfile").stdout)
    _run_example_locustfile(venv, project)


def _run_example_locustfile(venv: Path, scratch: Path) -> None:
    """`rushhour serve` in the background, the example locustfile with plain `locust` until chat was served."""
    port, ledger = _free_port(), scratch / "ledger.jsonl"
    serve = subprocess.Popen([str(venv / "bin" / "rushhour"), "serve", "--port", str(port), "--ledger", str(ledger),
                              "--preset", "tiny", "--replicas", "1"], cwd=scratch, env=_user_env(venv),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/v1/models", serve)
        err = scratch / "locust.err"
        code = locust_until_chat_served(
            [str(venv / "bin" / "locust"), "-f", "locustfile.py", "--headless", "-u", "4", "-r", "4", "-t", "120s",
             "--host", f"http://127.0.0.1:{port}", "--only-summary", "--rh-run-dir", "runs/example"],
            ledger, err, cwd=scratch, env=_user_env(venv))
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)
    log = err.read_text(errors="replace")[-2000:]
    assert code in (0, 1), log  # 1: requests cut off by the stop count as failures
    assert "Traceback" not in log, log
    assert served_chat(ledger), log
    _sh(venv, scratch, "rushhour", "audit", "runs/example", codes=(0,))


def _wait_http(url: str, proc: subprocess.Popen[bytes], limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s  # a loaded machine starts Python slowly
    while True:
        assert proc.poll() is None, "the testbed exited"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            assert time.monotonic() < deadline, f"{url} did not answer"
            time.sleep(0.1)

