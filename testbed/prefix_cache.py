"""LRU prefix cache keyed on chained block hashes (vLLM automatic prefix caching)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Blocks whose KV stays reusable after their request ends, evicted least-recently-used."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, blocks: Sequence[bytes], touch: bool = True) -> int:
        """Number of leading blocks already cached (the longest cached chain)."""
        n = 0
        for h in blocks:
            if h not in self._blocks:
                break
            if touch:
                self._blocks.move_to_end(h)
            n += 1
        return n

    def insert(self, blocks: Sequence[bytes], limit_blocks: int | None = None) -> None:
        """Add a finished prefill's blocks, then evict down to `limit_blocks` (free KV)."""
        for h in blocks:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        cap = self.capacity_blocks if limit_blocks is None else min(self.capacity_blocks, limit_blocks)
        while len(self._blocks) > max(0, cap):
            self._blocks.popitem(last=False)
