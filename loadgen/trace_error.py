"""The one error a trace or dataset reader raises: one line naming the file (and the line) and what is wrong."""

from __future__ import annotations


class TraceError(ValueError):
    """A trace file that cannot be used: one line naming the file (and the line) and what is wrong."""
