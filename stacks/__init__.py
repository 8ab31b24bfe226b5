"""Stack profiles: one module per serving stack, holding everything rushhour knows about it.

The bottom layer: standard library only, imports nothing else of rushhour. A profile
(``stacks.profile.StackProfile``) holds the wire mapping of tiers, the classification rules and
status defaults, the reason headers, the metrics the scraper keeps and the audit cross-checks, and the
testbed profile that imitates the stack. To add a stack, write ``stacks/<name>.py`` defining
``PROFILE = StackProfile(...)`` and add it to ``STACKS`` in ``stacks/registry.py``.
"""

from __future__ import annotations

from rushhour.stacks.profile import CounterCheck, Metrics, Rule, StackProfile, Wire
from rushhour.stacks.registry import (
    DEFAULT,
    NAMES,
    STACKS,
    UnknownProfile,
    canonical,
    get,
    header_reason,
    testbed_profile,
)

__all__ = [
    "DEFAULT",
    "NAMES",
    "STACKS",
    "CounterCheck",
    "Metrics",
    "Rule",
    "StackProfile",
    "UnknownProfile",
    "Wire",
    "canonical",
    "get",
    "header_reason",
    "testbed_profile",
]
