"""The find-limit controller's channel to the load processes: the load scale, one small file in the run folder.

The parent (the runner) writes ``control/load_scale.json`` atomically (a temporary file renamed over it) each
time the controller changes the load; every local load process reads it at most every ``POLL_S`` (a stat, and
a read only when it changed) and multiplies its open-loop arrival rates by it. A file, not a Locust message:
the runner is not Locust's master, and every local process (master or worker) shares the run folder. Bounded
and hostile-safe: a file over ``MAX_BYTES``, not JSON, or with a scale outside ``[0, MAX_SCALE]`` keeps the
last good scale. Standard library only (both sides import it).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

CONTROL_DIR = "control"
SCALE_FILE = "load_scale.json"
POLL_S = 0.25  # how stale a process's scale may be: well under a step's settling gap
MAX_BYTES = 4096
MAX_SCALE = 1000.0


def scale_path(run_dir: Path) -> Path:
    return Path(run_dir) / CONTROL_DIR / SCALE_FILE


def write_scale(run_dir: Path, scale: float, persona: str | None = None, seq: int = 0) -> None:
    """Set the load: ``scale`` × the rates of ``persona`` (None: every persona), atomically."""
    path = scale_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"scale": scale, "persona": persona, "seq": seq}))
    os.replace(tmp, path)


def parse_scale(data: bytes) -> tuple[float, str | None] | None:
    """(scale, persona) from the file's bytes; None when they are not a valid setting."""
    if len(data) > MAX_BYTES:
        return None
    try:
        obj: Any = json.loads(data)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    scale, persona = obj.get("scale"), obj.get("persona")
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        return None
    if not 0 <= scale <= MAX_SCALE or not (persona is None or isinstance(persona, str)):
        return None
    return float(scale), persona


class LiveScale:
    """A load process's view of the scale: ``of(persona)``, re-read when the file changed (at most every POLL_S)."""

    def __init__(self, run_dir: Path, initial: float = 1.0, clock: Any = time.monotonic) -> None:
        self.path = scale_path(run_dir)
        self.clock = clock
        self.scale: float = initial
        self.persona: str | None = None
        self._seen: tuple[int, int] | None = None
        self._next = 0.0

    def of(self, persona: str) -> float:
        """The multiplier of ``persona``'s arrival rate now."""
        now = self.clock()
        if now >= self._next:
            self._next = now + POLL_S
            self._refresh()
        return self.scale if self.persona is None or self.persona == persona else 1.0

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
            key = (st.st_mtime_ns, st.st_size)
            if key == self._seen:
                return
            with self.path.open("rb") as handle:
                data = handle.read(MAX_BYTES + 1)
        except OSError:
            return
        self._seen = key
        found = parse_scale(data)
        if found is not None:
            self.scale, self.persona = found
