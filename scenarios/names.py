"""The nearest valid name to a mistyped one: a case hint (``vLLM`` → ``vllm``), else difflib's closest match."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

CUTOFF = 0.6  # difflib's own default: 'demoo' → 'demo', 'interactve' → 'interactive', nothing for 'batch' → 'chat'


def nearest(name: str, options: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The option ``name`` most likely meant: the same name in another case first, else the closest one."""
    choices = [o for o in options if isinstance(o, str)]
    folded = [o for o in choices if o.casefold() == name.casefold()]
    if folded:
        return folded[0]
    close = difflib.get_close_matches(name, choices, n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(name: str, options: Iterable[str], cutoff: float = CUTOFF) -> str:
    """A hint for a name that is not among ``options``: the case to use, a near name, or '' when none is near."""
    choices = list(options)
    match = nearest(name, choices, cutoff)
    if match is None or match == name:
        return ""
    if match.casefold() == name.casefold():
        return f"names are case-sensitive: {match!r}"
    return f"did you mean {match!r}?"
