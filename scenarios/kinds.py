"""The registry of persona kinds and typed look-ups (adding a kind = its model + one line in ``model.Persona``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from rushhour.scenarios.model import PERSONA_MODELS, kind_of

# Every ``kind`` a scenario may name, in the union's order.
NAMES: tuple[str, ...] = tuple(PERSONA_MODELS)

T = TypeVar("T")

# Every per-kind table a higher layer passed through ``every_kind``, by its module (the foundation test reads them).
TABLES: dict[str, Mapping[str, Any]] = {}


class MissingKind(RuntimeError):
    """A per-kind table of a higher layer that lacks a registered kind (or names one that is not)."""


def model(kind: str) -> Any:
    """The model class of a kind; ``KeyError`` naming the known kinds if there is none."""
    if kind not in PERSONA_MODELS:
        raise KeyError(f"unknown persona kind {kind!r} (known: {', '.join(NAMES)})")
    return PERSONA_MODELS[kind]


def of_kind(personas: Iterable[object], cls: type[T]) -> list[T]:
    """The personas of one kind, typed as its model (a study that splits chat personas, a trace read ahead)."""
    return [p for p in personas if isinstance(p, cls)]


def as_kind(persona: object, cls: type[T]) -> T:
    """``persona`` typed as the model ``cls``; TypeError if it is another kind (a class wired to the wrong kind)."""
    if not isinstance(persona, cls):
        raise TypeError(f"expected a {kind_of(cls)} persona, got {type(persona).__name__}")  # type: ignore[arg-type]
    return persona


def every_kind(table: Mapping[str, T], where: str) -> Mapping[str, T]:
    """``table`` if it has exactly one entry per registered kind, else ``MissingKind`` in one line.

    Each layer keys its per-kind behaviour (flow, driver, dry-run estimate, size check, …) by kind and passes
    its table through this at import, so a new kind that a layer forgot fails there, never as a silent fallthrough.
    """
    missing, extra = [k for k in PERSONA_MODELS if k not in table], [k for k in table if k not in PERSONA_MODELS]
    if missing or extra:
        raise MissingKind(f"{where}: per-kind table " + "; ".join(
            ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"names unknown {', '.join(extra)}"]
                                                                     if extra else [])))
    TABLES[where] = table
    return table
