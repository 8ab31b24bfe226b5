"""Output into a pipe that closes early (``rushhour compare … | head -1``) is not an error.

Click turns a broken pipe into exit 1, so a comparison that passed looked failed. Instead, once the
reader has gone, standard output is pointed at /dev/null (what the Python docs advise for SIGPIPE)
and the command runs on to its own verdict and exit code.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


class PipeSafe:
    """A text stream that turns the first broken pipe into a silent /dev/null for the rest of the run."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def _broke(self) -> None:
        self.broken = True
        try:  # later writes and the interpreter's final flush go nowhere, without an error
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if self.broken:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._broke()
            return len(text)

    def flush(self) -> None:
        if self.broken:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._broke()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, …: the real stream's
        return getattr(self._stream, name)


def guard_stdout() -> None:
    """Wrap ``sys.stdout`` (once) so a reader that stops early does not change the exit code."""
    if not isinstance(sys.stdout, PipeSafe) and sys.stdout is not None:
        sys.stdout = PipeSafe(sys.stdout)
