"""The one exception the audit raises for a run it cannot read."""

from __future__ import annotations


class AuditError(Exception):
    """A run folder that cannot be audited; ``str()`` says why in one line."""
