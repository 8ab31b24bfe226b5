"""The retry stream of a logical request is the host's, seeded only when a retry first draws from it."""

from __future__ import annotations

import random
from typing import Any

from rushhour.loadgen.flow.send import _LazyRng


class _Host:
    def __init__(self) -> None:
        self.seeded: list[tuple[object, ...]] = []

    def rng(self, *parts: object) -> random.Random:
        self.seeded.append(parts)
        return random.Random(repr(parts))


def test_the_retry_rng_is_seeded_on_first_use_with_the_same_stream() -> None:
    host: Any = _Host()
    lazy: Any = _LazyRng(host, ("retry", "abc", 0))
    assert host.seeded == []  # a request served at once never pays for a seeded stream
    ref = random.Random(repr(("retry", "abc", 0)))
    assert [lazy.uniform(0.0, 2.0) for _ in range(5)] == [ref.uniform(0.0, 2.0) for _ in range(5)]
    assert lazy.random() == ref.random()
    assert host.seeded == [("retry", "abc", 0)]  # once
