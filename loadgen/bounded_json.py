"""JSON nesting checked before parsing (pure): a 100,000-deep row is one line of error, not a RecursionError."""

from __future__ import annotations

import re
from itertools import accumulate

MAX_JSON_DEPTH = 16  # a dataset row is at most 5 deep (row, messages, message, content parts, part)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # unrolled: linear, no per-character alternation
_BRACKETS = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JsonShapeError(ValueError):
    """JSON nested deeper than a row may be."""


def depth(text: str) -> int:
    """How deep the brackets of ``text`` nest, strings left out; in C-speed passes, no recursion."""
    bare = _STRING.sub("", text)
    if bare.count("[") + bare.count("{") <= MAX_JSON_DEPTH:  # the common case: too few to be too deep
        return bare.count("[") + bare.count("{")
    return max(accumulate(_STEP[c] for c in _BRACKETS.findall(bare)), default=0)


def check_depth(text: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise ``JsonShapeError`` when ``text`` nests deeper than ``limit``."""
    found = depth(text)
    if found > limit:
        raise JsonShapeError(f"JSON nested {found:,} deep, more than the {limit} a row may be")
