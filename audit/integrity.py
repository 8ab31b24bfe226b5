"""Tamper evidence for a run folder: ``integrity.json``, the SHA-256 of every file, written by the audit.

The manifest names the run and holds the content hash of each **input** (``run.json``, every shard and
sidecar, ``metrics.jsonl``, the logs and ledgers: every file of the folder the audit did not write) and
of each **output** the audit and the reports wrote (``summary.json``, ``attempts.parquet``, the reports).
The outputs are bound to the inputs: the manifest carries the digest of its input list
(``inputs_sha256``), and the attempts table carries the same digest in its metadata beside the summary's
hash. Readers of the table (``report``, ``compare``, ``history``, ``drops.csv``) hash it and the summary
(milliseconds) and refuse one the manifest does not name, in one line naming the file; ``rushhour audit``
derives it again from the records; ``rushhour verify`` hashes every file and names what changed, appeared
or went missing.

Standard library only. What it cannot see: someone who rewrites a file *and* the manifest; a signature
(``rushhour verify --sign``, kept in ``integrity.sig``) closes that for whoever holds the public key.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rushhour.audit.errors import AuditError

INTEGRITY_FILE = "integrity.json"
SIGNATURE_FILE = "integrity.sig"
INTEGRITY_SCHEMA = "rushhour.integrity/1"
# what the audit and the reports write into a run folder (everything else there is the run's input)
OUTPUT_FILES = ("summary.json", "attempts.parquet", "drops.csv", "report.html", "report.md", "junit.xml")
TABLE_AND_SUMMARY = ("attempts.parquet", "summary.json")
MAX_FILES = 100_000  # a hostile folder of millions of files is refused, not walked for hours
MAX_MANIFEST_BYTES = 64 << 20  # ~ 400k entries: far above MAX_FILES
_HEX64 = re.compile(r"[0-9a-f]{64}")


class IntegrityError(AuditError):
    """A run folder whose files are not the ones its manifest names (or whose manifest is damaged)."""


@dataclass(frozen=True)
class Entry:
    """One file's content: its SHA-256 and size (and, for an input, the stat it was hashed at: not its content)."""

    sha256: str
    size: int
    stat: tuple[int, ...] | None = field(default=None, compare=False)

    def as_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size}

    def stored(self) -> dict[str, Any]:
        return {**self.as_json(), "stat": list(self.stat)} if self.stat else self.as_json()


@dataclass
class Manifest:
    """``integrity.json``: the run, its inputs' hashes (and their digest), the outputs' hashes."""

    run_id: str
    inputs: dict[str, Entry]
    outputs: dict[str, Entry] = field(default_factory=dict)
    # inputs a later audit found rewritten or removed (not just grown) since the folder was first sealed, as first
    # sealed: an audit again re-derives the outputs, it never forgets that the run's own files changed
    rewritten: dict[str, Entry] = field(default_factory=dict)

    @property
    def inputs_sha256(self) -> str:
        return inputs_digest(self.inputs)

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": INTEGRITY_SCHEMA, "algorithm": "sha256", "run_id": self.run_id,
            "inputs_sha256": self.inputs_sha256,
            "inputs": {name: e.stored() for name, e in sorted(self.inputs.items())},
            "outputs": {name: e.stored() for name, e in sorted(self.outputs.items())},
            "rewritten": {name: e.as_json() for name, e in sorted(self.rewritten.items())},
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.as_json(), indent=1, sort_keys=True) + "\n").encode()

    def content_bytes(self) -> bytes:
        """What a signature covers: the run, every file's hash and size, in canonical JSON (not the stat hints,
        which a re-audit of the same files changes)."""
        body = {**self.as_json(), "inputs": {n: e.as_json() for n, e in self.inputs.items()},
                "outputs": {n: e.as_json() for n, e in self.outputs.items()}}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Difference:
    """What ``verify`` found: files changed, files the manifest does not name, files it names that are gone."""

    changed: list[str]
    added: list[str]
    removed: list[str]

    @property
    def intact(self) -> bool:
        return not (self.changed or self.added or self.removed)


def inputs_digest(inputs: dict[str, Entry]) -> str:
    """The SHA-256 of the input list (names, hashes, sizes) in canonical JSON: what the outputs are bound to."""
    text = json.dumps({n: e.as_json() for n, e in sorted(inputs.items())}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def hash_file(path: Path) -> Entry:
    """A regular file's SHA-256 and size, read in chunks (OSError for a symlink, a FIFO or a device: never followed,
    never waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256")
        return Entry(digest.hexdigest(), handle.tell())


def _is_temporary(name: str) -> bool:
    """A writer's temporary file (``.attempts.parquet.<pid>.tmp``, ``report.html.tmp``): never part of the run."""
    return name.startswith(".") or name.endswith(".tmp")


def folder_files(run_dir: Path) -> list[str]:
    """Every file of the folder, as relative POSIX paths, sorted (not the manifest, its signature or temp files)."""
    run_dir = Path(run_dir)
    try:
        return sorted(_walk(run_dir))
    except RecursionError:
        raise IntegrityError(f"{run_dir}: folders nested too deep: not a run folder") from None


def _walk(run_dir: Path) -> Iterator[str]:
    count = 0
    for root, dirs, files in os.walk(run_dir):  # never follows a symlinked folder
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            rel = (Path(root) / name).relative_to(run_dir).as_posix()
            if _is_temporary(name) or rel in (INTEGRITY_FILE, SIGNATURE_FILE):
                continue
            count += 1
            if count > MAX_FILES:
                raise IntegrityError(f"{run_dir}: more than {MAX_FILES:,} files: not a run folder")
            yield rel


def _entry_of(run_dir: Path, rel: str) -> Entry:
    path = run_dir / rel
    try:
        return hash_file(path)
    except OSError:  # a symlink, a FIFO, a file gone meanwhile: hashed as what it is, so it never matches
        target = os.readlink(path) if path.is_symlink() else "(not a readable regular file)"
        return Entry(hashlib.sha256(f"not a regular file: {target}".encode()).hexdigest(), -1)


def _stat_key(path: Path) -> tuple[int, ...] | None:
    """What changes whenever a file's bytes may have: size, mtime, ctime (which no user can set back) and inode."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def hash_inputs(run_dir: Path, previous: Manifest | None = None) -> dict[str, Entry]:
    """Every input file's hash: each file of the folder but the audit's and the reports' outputs.

    A file whose stat is the one ``previous`` hashed it at keeps that hash (a gate or a re-audit of an
    unchanged run reads no input twice); ``verify`` never does this: it hashes every byte.
    """
    run_dir = Path(run_dir)
    found: dict[str, Entry] = {}
    for rel in folder_files(run_dir):
        if rel in OUTPUT_FILES:
            continue
        key = _stat_key(run_dir / rel)
        old = previous.inputs.get(rel) if previous else None
        if key is not None and old is not None and old.stat == key:
            found[rel] = old
            continue
        found[rel] = _with_stat(run_dir / rel, key)
    return found


def _with_stat(path: Path, key: tuple[int, ...] | None = None) -> Entry:
    """The file's hash with the stat it had before and after hashing (none if it changed meanwhile)."""
    key = key or _stat_key(path)
    entry = _entry_of(path.parent, path.name)
    return Entry(entry.sha256, entry.size, key if key is not None and _stat_key(path) == key else None)


def _entry(value: Any, where: str) -> Entry:
    if not (isinstance(value, dict) and isinstance(value.get("sha256"), str) and _HEX64.fullmatch(value["sha256"])
            and isinstance(value.get("size"), int) and not isinstance(value.get("size"), bool)):
        raise ValueError(f"{where}: not a sha256 and a size")
    hint = value.get("stat")
    if not (isinstance(hint, list) and len(hint) == 4 and all(type(v) is int for v in hint)):
        hint = None  # no stat (an output) or a foreign one: the file is hashed again
    return Entry(value["sha256"], value["size"], tuple(hint) if hint else None)


def parse_manifest(data: bytes) -> Manifest:
    """``integrity.json``'s bytes as a Manifest; ValueError saying what is wrong (bounded and typed: hostile input)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"larger than {MAX_MANIFEST_BYTES >> 20} MiB")
    raw = json.loads(data)
    if not isinstance(raw, dict) or raw.get("schema") != INTEGRITY_SCHEMA:
        raise ValueError(f"not a {INTEGRITY_SCHEMA} manifest")
    if not isinstance(raw.get("run_id"), str):
        raise ValueError("no run_id")
    parts: dict[str, dict[str, Entry]] = {}
    for key in ("inputs", "outputs", "rewritten"):
        section = raw.get(key, {} if key == "rewritten" else None)
        if not isinstance(section, dict) or len(section) > MAX_FILES:
            raise ValueError(f"no {key} table")
        parts[key] = {str(name): _entry(value, f"{key}.{name}") for name, value in section.items()}
    manifest = Manifest(raw["run_id"], parts["inputs"], parts["outputs"], parts["rewritten"])
    if raw.get("inputs_sha256") != manifest.inputs_sha256:
        raise ValueError("inputs_sha256 is not the digest of its inputs")
    return manifest


def read_manifest(run_dir: Path) -> Manifest | None:
    """The folder's manifest; None when there is none (a run audited before manifests); IntegrityError if damaged."""
    path = Path(run_dir) / INTEGRITY_FILE
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise IntegrityError(f"{path}: cannot read the integrity manifest: {exc.strerror or exc}") from None
    try:
        return parse_manifest(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise IntegrityError(f"{path}: damaged integrity manifest ({str(exc)[:120]})") from None


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """The folder locked against another rushhour process updating its manifest (flock on the folder itself)."""
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write(run_dir: Path, manifest: Manifest) -> None:
    path = Path(run_dir) / INTEGRITY_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(manifest.to_bytes())
    tmp.replace(path)


def unseal(run_dir: Path) -> None:
    """Remove the manifest before the outputs are replaced: a killed audit leaves an unsealed folder (audited again)."""
    with contextlib.suppress(FileNotFoundError):
        (Path(run_dir) / INTEGRITY_FILE).unlink()


def previous_manifest(run_dir: Path) -> Manifest | None:
    """The folder's manifest before an audit replaces it (None: none, or damaged)."""
    try:
        return read_manifest(run_dir)
    except IntegrityError:
        return None


def seal(run_dir: Path, run_id: str, inputs: dict[str, Entry], outputs: Iterable[str],
         previous: Manifest | None = None) -> Manifest:
    """Write the manifest of a fresh audit: ``inputs`` (hashed before the audit read them) and ``outputs`` hashed now.

    ``previous`` is the manifest the audit replaces: inputs it sealed that are rewritten or gone are kept
    in ``rewritten``; reports an earlier audit wrote stay named while their bytes are the ones it named
    (they are rushhour's, of an earlier audit); anything else is left out, so ``verify`` names it.
    """
    run_dir = Path(run_dir)
    with _locked(run_dir):
        manifest = Manifest(run_id, dict(inputs), {name: _with_stat(run_dir / name) for name in outputs})
        if previous is not None:
            manifest.rewritten = {**_rewritten(run_dir, previous.inputs, inputs), **previous.rewritten}
        for name, entry in (previous.outputs.items() if previous else ()):
            if name not in manifest.outputs and (run_dir / name).is_file() and _entry_of(run_dir, name) == entry:
                manifest.outputs[name] = entry
        _write(run_dir, manifest)
    return manifest


def _grown(path: Path, before: Entry) -> bool:
    """True when the file's first ``before.size`` bytes are still the ones hashed (a shard or log that only grew)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    digest, left = hashlib.sha256(), before.size
    with os.fdopen(fd, "rb") as handle:
        while left > 0:
            chunk = handle.read(min(left, 1 << 20))
            if not chunk:
                return False
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest() == before.sha256


def _rewritten(run_dir: Path, before: dict[str, Entry], now: dict[str, Entry]) -> dict[str, Entry]:
    """The inputs sealed before that are gone now or changed other than by growing, as they were sealed."""
    return {name: old for name, old in before.items() if now.get(name) != old
            and not (name in now and now[name].size > old.size and _grown(run_dir / name, old))}


def record_outputs(run_dir: Path, names: Iterable[str]) -> bool:
    """Add files just written (the reports) to the manifest; False when the folder has none (nothing to add to)."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        manifest = read_manifest(run_dir)
        if manifest is None:
            return False
        for name in names:
            manifest.outputs[name] = _with_stat(run_dir / name)
        _write(run_dir, manifest)
    return True


def check_outputs(run_dir: Path, names: Iterable[str] = TABLE_AND_SUMMARY,
                  table_inputs_sha256: str | None = None) -> Manifest | None:
    """The manifest when each of ``names`` is the file it names, None when the folder has no manifest.

    IntegrityError (one line naming the file) when a file is not the one the audit wrote: edited, damaged,
    removed, or never sealed; or when the table's own digest of its inputs (``table_inputs_sha256``) is
    not the manifest's.
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    if manifest is None:
        return None
    for name in names:
        path = run_dir / name
        expected = manifest.outputs.get(name)
        if expected is None:
            if path.exists():
                raise IntegrityError(f"{path}: not written by the audit {INTEGRITY_FILE} records; {_HINT}")
            continue
        if not path.exists():
            raise IntegrityError(f"{path}: removed after the audit; {_HINT}")
        if expected.stat is not None and _stat_key(path) == expected.stat:
            continue  # not written since it was hashed (any write changes its ctime, which no one can set back)
        if _entry_of(run_dir, name) != expected:
            raise IntegrityError(f"{path}: changed after the audit (its SHA-256 is not the one in {INTEGRITY_FILE}): "
                                 f"not trusted; {_HINT}")
    if table_inputs_sha256 is not None and table_inputs_sha256 != manifest.inputs_sha256:
        raise IntegrityError(f"{run_dir / TABLE_AND_SUMMARY[0]}: bound to other inputs than {INTEGRITY_FILE} "
                             f"names; {_HINT}")
    return manifest


_HINT = "`rushhour verify` on the folder names what changed, `rushhour audit` derives it again from the records"


def compare_folder(run_dir: Path, manifest: Manifest) -> Difference:
    """Every file of the folder hashed now against the manifest: changed, added and removed paths."""
    run_dir = Path(run_dir)
    named = {**manifest.inputs, **manifest.outputs}
    present = folder_files(run_dir)
    changed = [rel for rel in present if rel in named and _entry_of(run_dir, rel) != named[rel]]
    added = [rel for rel in present if rel not in named]
    removed = sorted(set(named) - set(present))
    return Difference(changed, added, removed)
