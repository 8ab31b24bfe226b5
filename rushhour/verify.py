"""``rushhour verify RUN_DIR``: is the folder the one its audit sealed? Names each file changed, added or removed.

Exit 0 intact (and, with ``--key``, signed by that key), 1 tampered (a file, the manifest or the signature),
2 usage: no such folder, no manifest to check against, a key that cannot be used. ``--sign env:NAME`` signs
an intact folder's manifest (``integrity.sig``); a tampered one is never signed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rushhour.audit.integrity import (
    INTEGRITY_FILE,
    OUTPUT_FILES,
    SIGNATURE_FILE,
    TABLE_AND_SUMMARY,
    IntegrityError,
    Manifest,
    compare_folder,
    read_manifest,
)
from rushhour.audit.table import stored_inputs

EXIT_INTACT, EXIT_TAMPERED, EXIT_USAGE = 0, 1, 2


@dataclass
class Outcome:
    """What verify found: its exit code, the lines to print (stdout) and a one-line error (stderr) when it could not."""

    code: int
    lines: list[str] = field(default_factory=list)
    error: str | None = None


def _usage(message: str) -> Outcome:
    return Outcome(EXIT_USAGE, error=message)


def _binding_problem(run_dir: Path, manifest: Manifest) -> str | None:
    """The attempts table must name the inputs the manifest names (its metadata's digest)."""
    if TABLE_AND_SUMMARY[0] not in manifest.outputs:
        return None
    stored = stored_inputs(run_dir) or {}
    if stored.get("inputs_sha256") != manifest.inputs_sha256:
        return f"{TABLE_AND_SUMMARY[0]} is bound to other inputs than {INTEGRITY_FILE} names"
    return None


def _unsealed_output(name: str) -> str:
    """Why a report the manifest does not name may be there: written before the last audit sealed the folder."""
    if name in OUTPUT_FILES:
        return " (a report no seal names: written before the last audit, or edited; `rushhour report` writes it again)"
    return ""


def verify(run_dir: Path, key: str | None = None, sign: str | None = None) -> Outcome:
    """Check ``run_dir`` against its manifest (and signature); sign it with ``sign`` when intact."""
    if key and sign:
        return _usage("--key checks a signature and --sign makes one: give one of them")
    if not run_dir.is_dir():
        return _usage(f"no such run folder: {run_dir}")
    if not (run_dir / INTEGRITY_FILE).exists():
        return _usage(f"{run_dir}: no {INTEGRITY_FILE} to check against (audited before manifests, or never): "
                      f"`rushhour audit --force {run_dir}` writes one")
    loaded = None
    if key or sign:  # the key first: a bad key is a usage error whatever the folder holds
        from rushhour.signing import KeyProblem, load_key

        try:
            loaded = load_key(key or sign or "")
        except KeyProblem as exc:
            return _usage(str(exc))
        if sign and loaded.private is None:
            return _usage("--sign needs the private key; this environment variable holds a public key")
    try:
        manifest = read_manifest(run_dir)
        if manifest is None:  # removed since we looked
            return _usage(f"{run_dir}: no {INTEGRITY_FILE} to check against")
        difference = compare_folder(run_dir, manifest)
    except IntegrityError as exc:
        return Outcome(EXIT_TAMPERED, [f"TAMPERED: {exc}"])
    lines = [f"changed  {p}" for p in difference.changed]
    lines += [f"added    {p}{_unsealed_output(p)}" for p in difference.added]
    lines += [f"removed  {p}" for p in difference.removed]
    lines += [f"rewritten {p} (an input changed after the folder was first sealed; audited again since)"
              for p in sorted(manifest.rewritten)]
    binding = _binding_problem(run_dir, manifest) if not difference.changed else None
    if binding:
        lines.append(f"unbound  {binding}")
    if lines:
        count = len(lines)
        return Outcome(EXIT_TAMPERED, [*lines, f"TAMPERED: {run_dir} ({manifest.run_id}): {count} file(s) are not "
                                              f"what {INTEGRITY_FILE} records"])
    named = len(manifest.inputs) + len(manifest.outputs)
    lines = [f"intact: {run_dir} ({manifest.run_id}): {named} file(s), {len(manifest.inputs)} input(s) and "
             f"{len(manifest.outputs)} output(s), match {INTEGRITY_FILE}"]
    if loaded is None:
        return Outcome(EXIT_INTACT, lines)
    from rushhour.signing import MAX_SIGNATURE_BYTES, check, read_bounded
    from rushhour.signing import sign as make_signature

    manifest_bytes = manifest.content_bytes()
    if sign:
        path = run_dir / SIGNATURE_FILE
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(make_signature(manifest_bytes, loaded))
        tmp.replace(path)
        return Outcome(EXIT_INTACT, [*lines, f"signed: {path} (ed25519, key {loaded.key_id})"])
    sig_path = run_dir / SIGNATURE_FILE
    if not sig_path.is_file():
        return Outcome(EXIT_TAMPERED, [*lines, f"NOT SIGNED: {run_dir} has no {SIGNATURE_FILE} (key {loaded.key_id})"])
    problem = check(manifest_bytes, read_bounded(sig_path, MAX_SIGNATURE_BYTES), loaded)
    if problem:
        return Outcome(EXIT_TAMPERED, [*lines, f"BAD SIGNATURE: {sig_path}: {problem}"])
    return Outcome(EXIT_INTACT, [*lines, f"signature good: ed25519, key {loaded.key_id}"])
