"""``--find-limit-from``: where a find-limit search starts, read from a scale, a bracket or a run folder.

A prior bracket (a simulated run's answer, `rushhour simulate --find-limit`, or a figure a user has) lets the real
run spend its steps around the limit: its low first, then its high, then steps away from it that grow until the
limit is bracketed (audit/limit.py). Standard library only: the CLI reads it before anything starts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rushhour.records.manifest import RUN_MANIFEST, read_manifest

MAX_BYTES = 4 * 1024 * 1024  # a run.json larger than this is not read


class PriorError(ValueError):
    """A --find-limit-from value that names no bracket: one line for the user."""


def read_prior(text: str) -> dict[str, Any]:
    """``LOW``, ``LOW..HIGH`` (× the personas' rates) or a find-limit run folder (its run.json's answer)."""
    path = Path(text)
    if path.is_dir() or path.name == RUN_MANIFEST:
        return _from_run(path / RUN_MANIFEST if path.is_dir() else path)
    low_text, sep, high_text = text.partition("..")
    try:
        low = float(low_text)
        high = float(high_text) if sep else None
    except ValueError:
        raise PriorError(f"--find-limit-from {text!r}: give LOW, LOW..HIGH (× the rates) or a find-limit run "
                         "folder") from None
    return _checked({"low": low, "high": high, "base_rps": None, "persona": None, "source": text}, text)


def _from_run(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_BYTES:
            raise PriorError(f"--find-limit-from {path}: over {MAX_BYTES // 1024 // 1024} MiB, not a run.json")
        found = read_manifest(path.parent).extra.get("find_limit")  # the one reader of run.json
    except (OSError, ValueError) as exc:
        raise PriorError(f"--find-limit-from {path}: not a readable run.json ({exc})") from None
    if not isinstance(found, dict):
        raise PriorError(f"--find-limit-from {path}: the run has no find-limit answer (run it with --find-limit)")
    low, high = found.get("low_scale"), found.get("high_scale")
    if not _number(low):  # the limit below the first level: start at the level that failed, and step down
        low, high = high, None
    if not _number(low):
        raise PriorError(f"--find-limit-from {path}: its search bracketed nothing (status {found.get('status')!r})")
    rps = found.get("base_rps")
    persona = found.get("persona")
    return _checked({"low": low, "high": high if _number(high) else None,
                     "base_rps": rps if _number(rps) else None,
                     "persona": persona if isinstance(persona, str) else None, "source": str(path.parent)}, str(path))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _checked(prior: dict[str, Any], where: str) -> dict[str, Any]:
    low, high = prior["low"], prior["high"]
    if not _number(low) or low > 1000 or (high is not None and (not _number(high) or high <= low or high > 1000)):
        raise PriorError(f"--find-limit-from {where}: a scale in (0, 1000], and a high over the low")
    return prior
