"""Progress inside a sweep or study step: a line every few seconds, so a CI log is never silent for long.

The step's run writes its shards under ``<step folder>/<run id>/records/``; a watcher thread tails
them (``loadgen.live.ShardTail``, which reads only the bytes appended since the last look) and says
the step's elapsed time and how many requests have finished.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

PROGRESS_EVERY_S = 5.0


class StepWatch:
    """While the ``with`` block runs: every ``interval_s``, ``say`` a line about the step's progress."""

    def __init__(self, folder: Path, label: str, say: Callable[[str], None],
                 interval_s: float = PROGRESS_EVERY_S) -> None:
        self.folder = Path(folder)
        self.label = label
        self.say = say
        self.interval_s = interval_s
        self.started = time.monotonic()
        self._tail: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="step-progress", daemon=True)

    def __enter__(self) -> StepWatch:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 1.0)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # progress is a courtesy: it never stops the step
                self.say(self.line())

    def _run_dir(self) -> Path | None:
        runs = [p.parent for p in self.folder.glob("*/records") if p.is_dir()]
        return max(runs, key=lambda p: p.stat().st_mtime) if runs else None

    def line(self) -> str:
        """``step 2/8 (1.5×): 15 s, 120 requests done (112 served)`` — or ``starting …`` before any record."""
        from rushhour.loadgen.live import ShardTail

        elapsed = time.monotonic() - self.started
        if self._tail is None:
            run_dir = self._run_dir()
            if run_dir is not None:
                self._tail = ShardTail(run_dir)
        if self._tail is None:
            return f"  {self.label}: {elapsed:.0f} s, starting …"
        self._tail.poll()
        done = sum(t.sent for t in self._tail.tiers.values())
        served = sum(t.served for t in self._tail.tiers.values())
        return f"  {self.label}: {elapsed:.0f} s, {done:,} requests done ({served:,} served)"
