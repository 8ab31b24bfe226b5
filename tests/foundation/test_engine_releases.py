"""engines/releases.toml and engines/install.sh: the release matrix the real tests run against, read fail-closed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from support import load_script

ROOT = Path(__file__).resolve().parents[2]




releases = load_script("engines/releases.py")


def test_the_listed_releases_have_one_pinned_per_engine_and_a_lock_each() -> None:
    listed = releases.load()
    for engine in ("vllm", "litellm"):
        mine = [r for r in listed if r.engine == engine]
        assert sum(r.pinned for r in mine) == 1
        assert len(mine) <= 2, f"{engine}: at most one extra release fits make test's budget"
    for release in listed:
        assert f"{release.dist}=={release.version}" in release.lock.read_text().splitlines()
        if release.engine == "vllm":  # any other torch pulls a multi-GB CUDA build
            assert "torch==2.13.0" in release.lock.read_text().splitlines(), release.name


@pytest.mark.parametrize(("toml", "error"), [
    ('[[release]]\nengine = "sglang"\nversion = "1.0.0"\npinned = true\n', "engine 'sglang' is not one of"),
    ('[[release]]\nengine = "vllm"\nversion = "latest"\npinned = true\n', "is not a release number"),
    ('[[release]]\nengine = "vllm"\nversion = "0.32.0"\npinned = "yes"\n', "pinned must be true or false"),
    ('[[release]]\nengine = "vllm"\nversion = "0.32.0"\npinned = true\nurl = "x"\n', "unknown keys ['url']"),
    ('[[release]]\nengine = "vllm"\nversion = "0.32.0"\npinned = true\n'
     '[[release]]\nengine = "vllm"\nversion = "0.31.0"\npinned = true\n', "exactly one pinned release"),
    ('[[release]]\nengine = "vllm"\nversion = "0.32.0"\npinned = true\n'
     '[[release]]\nengine = "litellm"\nversion = "9.9.9"\npinned = true\n', "no lock file"),
    ('[[release]]\nengine = "vllm"\nversion = "0.32.0"\npinned = true\nlacks = "vllm:x"\n', "lacks must be a list"),
    ("release = [", "releases.toml:"),
    ("", "no [[release]] tables"),
])
def test_a_wrong_release_file_is_a_one_line_error(tmp_path: Path, toml: str, error: str) -> None:
    path = tmp_path / "releases.toml"
    path.write_text(toml)
    with pytest.raises(releases.ReleaseError) as exc:
        releases.load(path)
    assert error in str(exc.value) and "\n" not in str(exc.value)


def test_install_names_an_unknown_release_in_one_line() -> None:
    proc = subprocess.run(["bash", str(ROOT / "engines" / "install.sh"), "vllm-0.0.1"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("engines/install.sh: no release vllm-0.0.1 in engines/releases.toml")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_install_returns_at_once_for_a_release_whose_stamp_matches_its_lock(tmp_path: Path) -> None:
    # no install happens here: a venv whose stamp holds its lock's hash is taken as installed, and one whose
    # lock changed is not (the stamp of another hash: install.sh would rebuild it, which this test cannot afford)
    extra = next(r for r in releases.load() if r.engine == "litellm" and not r.pinned)
    venv = tmp_path / extra.name
    venv.mkdir()
    (venv / ".rushhour-installed").write_text(hashlib.sha256(extra.lock.read_bytes()).hexdigest()[:16] + "\n")
    proc = subprocess.run(["bash", str(ROOT / "engines" / "install.sh"), extra.name], capture_output=True, text=True,
                          timeout=60, check=False, env={"PATH": "/usr/bin:/bin:" + str(Path(sys.executable).parent),
                                                        "RUSHHOUR_ENGINES": str(tmp_path), "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{extra.name}: already installed in {venv}"
