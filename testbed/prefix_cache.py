"""LRU prefix cache keyed on chained block hashes (vLLM automatic prefix caching), held as a radix tree.

vLLM frees a request's blocks tail first (``free_blocks(reversed(...))`` in ``single_type_kv_cache_manager``:
"so that the tail blocks are evicted first"), and a hit touches a prompt's leading blocks the same way. So a
block is always more recently used than the blocks after it in any prompt: the cached blocks of a chain are
always a prefix of it, and the cache is a tree of prompts' prefixes whose least recently used block is the
tail of some leaf. That lets the cache hold runs of blocks instead of blocks: a match walks a few runs, a touch
restamps them, an eviction trims a leaf's tail by as many blocks as are older than every other leaf's tail.
The blocks and their LRU order are those of a plain ordered dict with these rules (tests/testbed hold it to that).
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence
from itertools import count


class _Run:
    """Blocks ``start .. start + len(blocks)`` of every prompt through this node; block i's stamp is ``base - i``
    (the touch that stamped them gave the tail the oldest one)."""

    __slots__ = ("base", "blocks", "children", "parent", "start")

    def __init__(self, start: int, blocks: array[int], base: int, parent: _Run | None) -> None:
        self.start = start
        self.blocks = blocks
        self.base = base
        self.parent = parent
        self.children: dict[int, _Run] = {}

    def tail_stamp(self) -> int:
        return self.base - (self.start + len(self.blocks) - 1)


class PrefixCache:
    """Blocks whose KV stays reusable after their request ends, evicted least-recently-used (tail first)."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = capacity_blocks
        self._root = _Run(0, array("Q"), 0, None)
        self._size = 0
        self._clock = 0  # stamps handed out so far: every cached block has its own, the newest the highest
        self._leaves: list[tuple[int, int, _Run]] = []  # heap of (tail stamp, seq, leaf); stale entries skipped
        self._seq = count()

    def __len__(self) -> int:
        return self._size

    # ---- reading ---------------------------------------------------------------------------------
    def _walk(self, blocks: Sequence[int], guess: int = 0) -> tuple[list[_Run], int]:
        """The runs the prompt's cached prefix goes through, and that prefix's length (it may end inside the
        last run). ``guess``, a likely length, is tried first when the prefix ends inside a run (the same answer)."""
        path: list[_Run] = []
        node = self._root
        i = 0
        size = len(blocks)
        while i < size:
            child = node.children.get(blocks[i])
            if child is None:
                break
            own = child.blocks
            end = i + len(own)
            path.append(child)
            if end <= size and blocks[end - 1] == own[-1]:
                i, node = end, child  # a chained hash: the same last block is the same run
                continue
            # the prompt leaves this run (or ends) inside it: the first block that differs, by bisection
            lo, hi = i + 1, min(end, size)  # blocks[lo - 1] is the run's, blocks[hi] is not (or the end)
            if lo <= guess <= hi:  # a prefix hash: blocks agree up to some length, then never again
                if blocks[guess - 1] != own[guess - 1 - i]:
                    hi = guess - 1
                elif guess == hi or blocks[guess] != own[guess - i]:
                    return path, guess
                else:
                    lo = guess + 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if blocks[mid - 1] == own[mid - 1 - i]:
                    lo = mid
                else:
                    hi = mid - 1
            return path, lo
        return path, i

    def match(self, blocks: Sequence[int], touch: bool = True) -> int:
        """Number of leading blocks already cached (the longest cached chain); a touch makes them the most recently
        used, the first one newest."""
        path, n = self._walk(blocks)
        if touch and n:
            self._touch(path, n)
        return n

    def known(self, blocks: Sequence[int], guess: int = 0) -> int:
        """``match(blocks, touch=False)``: placement asks every replica for every request (``guess``: a likely
        answer, another replica's, tried first; the answer does not depend on it)."""
        if blocks and blocks[0] not in self._root.children:
            return 0
        return self._walk(blocks, guess)[1]

    # ---- writing ---------------------------------------------------------------------------------
    def _split(self, node: _Run, at: int) -> _Run:
        """Cut ``node`` before block ``at``: a new run for its head takes its place; it keeps the tail (and so its
        tail stamp, and its entry in the heap)."""
        k = at - node.start
        head = _Run(node.start, node.blocks[:k], node.base, node.parent)
        parent = node.parent
        assert parent is not None
        parent.children[node.blocks[0]] = head
        del node.blocks[:k]
        node.start = at
        node.parent = head
        head.children[node.blocks[0]] = node
        return head

    def _touch(self, path: list[_Run], n: int) -> None:
        """Stamp blocks 0..n-1 (the runs of ``path``) as the most recently used, block 0 newest."""
        last = path[-1]
        if last.start + len(last.blocks) > n:
            path[-1] = self._split(last, n)
        base = self._clock + n
        self._clock = base
        for node in path:
            node.base = base
        tip = path[-1]
        if not tip.children:
            heapq.heappush(self._leaves, (tip.tail_stamp(), next(self._seq), tip))

    def insert(self, blocks: Sequence[int], limit_blocks: int | None = None) -> None:
        """Add a finished prefill's blocks (all of them now the most recently used), then evict down to
        `limit_blocks` (free KV)."""
        size = len(blocks)
        if size:
            path, n = self._walk(blocks)
            if n < size:
                if path and path[-1].start + len(path[-1].blocks) > n:
                    path[-1] = self._split(path[-1], n)
                parent = path[-1] if path else self._root
                # a run holds its ids in an array (8 bytes each, not an object each, and not walked by the collector)
                tail = blocks[n:]
                leaf = _Run(n, tail if type(tail) is array else array("Q", tail), 0, parent)
                parent.children[leaf.blocks[0]] = leaf
                path.append(leaf)
                self._size += size - n
            self._touch(path, size)
        cap = self.capacity_blocks if limit_blocks is None else min(self.capacity_blocks, limit_blocks)
        if self._size > max(0, cap):
            self._evict(self._size - max(0, cap))

    def _live(self, entry: tuple[int, int, _Run]) -> bool:
        node = entry[2]
        return node.parent is not None and not node.children and len(node.blocks) > 0 and (
            node.tail_stamp() == entry[0])

    def _evict(self, count: int) -> None:
        """Drop the ``count`` least recently used blocks: leaf tails, oldest first, a run of them at a time. A run's
        blocks have consecutive stamps from one touch, and a touch stamps one path, whose only leaf is its tip: two
        leaves' stamps never interleave, so the oldest leaf's blocks are all older than any other leaf's."""
        heap = self._leaves
        live = self._live
        while count > 0:
            entry = heapq.heappop(heap)
            if not live(entry):
                continue
            node = entry[2]
            own = node.blocks
            k = min(count, len(own))
            count -= k
            self._size -= k
            if k < len(own):
                del own[len(own) - k:]
                heapq.heappush(heap, (entry[0] + k, next(self._seq), node))
                continue
            parent = node.parent
            assert parent is not None
            del parent.children[own[0]]
            node.parent = None
            del own[:]
            if parent is not self._root and not parent.children:
                heapq.heappush(heap, (parent.tail_stamp(), next(self._seq), parent))

    def lru_order(self) -> list[int]:
        """Every cached block, least recently used first (tests)."""
        stamped: list[tuple[int, int]] = []
        todo = list(self._root.children.values())
        while todo:
            node = todo.pop()
            stamped.extend((node.base - (node.start + j), b) for j, b in enumerate(node.blocks))
            todo.extend(node.children.values())
        return [b for _, b in sorted(stamped)]
