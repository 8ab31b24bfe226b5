"""LRU prefix cache keyed on chained block hashes (vLLM automatic prefix caching)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import islice, repeat, takewhile

TIP_STEP = 64  # blocks between remembered chain tips (1,024 tokens at 16-token blocks)
ANCHORS = 4  # long prefixes remembered whole per cache: a swarm's shared context, a chat's system prompt, …


class PrefixCache:
    """Blocks whose KV stays reusable after their request ends, evicted least-recently-used."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        # chain tips known whole: prefix length (a multiple of TIP_STEP) -> the hash of its last block, every
        # block of that prefix cached. A block hash is chained, so an equal hash means the same prefix; an
        # insert never removes a block, so the tips hold until the next eviction, which forgets them all.
        self._tips: dict[int, bytes] = {}
        self._hint = 0  # the tip the last match started from (a swarm's shared context: the next one's too)
        # the newest entries, oldest first, when the last reordering left a prompt's leading blocks there in
        # order (a match's touch, an insert): an insert of a prompt that starts with them leaves them in place
        self._run: list[bytes] | None = None
        # the last few distinct matches of TIP_STEP blocks or more, newest first: (n, hash of block n - 1, the n
        # blocks), each known whole until an eviction takes one of its blocks (checked at each eviction)
        self._anchors: list[tuple[int, bytes, tuple[bytes, ...]]] = []

    def __len__(self) -> int:
        return len(self._blocks)

    def known(self, blocks: Sequence[bytes]) -> int | None:
        """``match(blocks)`` when it is known without a scan: 0 when the first block is not cached, or a remembered
        whole prefix's length when its last block is the prompt's and the prompt's next block is not cached; else
        None. Placement asks every replica for every request, and most answers are one of these two."""
        size = len(blocks)
        cached = self._blocks
        if not size or blocks[0] not in cached:
            return 0  # a conversation this replica never served (a chat session's prompt elsewhere, as a rule)
        for k, h, _ in self._anchors:
            if k <= size and blocks[k - 1] == h and (k == size or blocks[k] not in cached):
                return k
        return None

    def _remember(self, n: int, blocks: Sequence[bytes]) -> None:
        anchors = self._anchors
        h = blocks[n - 1]
        for i, (k, kh, _) in enumerate(anchors):
            if k == n and kh == h:  # a chained hash: the same last block is the same prefix
                if i:
                    anchors.insert(0, anchors.pop(i))
                return
        anchors.insert(0, (n, h, tuple(blocks[:n])))
        del anchors[ANCHORS:]

    def match(self, blocks: Sequence[bytes], touch: bool = True) -> int:
        """Number of leading blocks already cached (the longest cached chain)."""
        cached = self._blocks
        tips = self._tips
        start = 0
        size = len(blocks)
        for k, h, _ in self._anchors:
            if start < k <= size and blocks[k - 1] == h:
                # a remembered prefix, known whole; any prefix known whole is a valid start: the same count
                start = k
        if not start and tips:  # skip a prefix already known whole
            k = self._hint
            if 0 < k <= size and tips.get(k) == blocks[k - 1]:
                # up from the last match's tip: a swarm's tasks share their first tips and part after them, so
                # this stops at once where a search down from the top walks the whole private part (any known
                # tip is a valid start: the count is the same, only the blocks scanned after it differ)
                start, k = k, k + TIP_STEP
                while k <= size and tips.get(k) == blocks[k - 1]:
                    start, k = k, k + TIP_STEP
            else:
                k = size - size % TIP_STEP
                while k > 0:
                    if tips.get(k) == blocks[k - 1]:
                        start = k
                        break
                    k -= TIP_STEP
            self._hint = start
        # the loops run in C (takewhile over the dict's own __contains__, map over move_to_end): a long agent
        # context is a thousand blocks, scored on every replica for every placement
        n = start + len(list(takewhile(cached.__contains__, islice(blocks, start, None))))
        for k in range(start - start % TIP_STEP + TIP_STEP, n + 1, TIP_STEP):
            tips[k] = blocks[k - 1]
        if n >= TIP_STEP:  # a long prefix (a chat's few blocks are walked): the next match starts after it
            self._remember(n, blocks)
        if touch and n:
            touched = list(blocks[:n])
            deque(map(cached.move_to_end, touched), maxlen=0)
            self._run = touched
        return n

    def insert(self, blocks: Sequence[bytes], limit_blocks: int | None = None) -> None:
        """Add a finished prefill's blocks, then evict down to `limit_blocks` (free KV)."""
        cached = self._blocks
        # most recently used last, in the prompt's order: the new blocks are appended, and every block ends
        # at the end in the prompt's order, as dropping them all and appending them all would leave them.
        # Blocks already there stay put (the admission's match just moved the leading cached ones there);
        # the leading cached ones after them are moved; the rest, new as a rule, are appended
        run = self._run
        n = len(run) if run is not None and len(run) <= len(blocks) and run == blocks[: len(run)] else 0
        rest = list(blocks[n:])
        lead = len(list(takewhile(cached.__contains__, rest)))
        if lead:
            deque(map(cached.move_to_end, rest[:lead]), maxlen=0)
            rest = rest[lead:]
        before = len(cached)
        cached.update(zip(rest, repeat(None)))
        if len(cached) - before != len(rest):  # some after the first new one were cached: all to the end in turn
            deque(map(cached.move_to_end, rest), maxlen=0)
        self._run = list(blocks)
        cap = self.capacity_blocks if limit_blocks is None else min(self.capacity_blocks, limit_blocks)
        evict = len(cached) - max(0, cap)
        if evict > 0:
            self._tips.clear()
            if len(cached) - evict < len(blocks):
                self._run = None  # the eviction reaches into the prompt's own blocks
            # the least recently used first: popitem(last=False) over and over, in C
            deque(map(cached.popitem, repeat(False, evict)), maxlen=0)
            # the LRU end goes first, so a prefix touched since is whole as a rule: each anchor is checked (in C)
            # rather than forgotten (every prefill evicts once the cache is full)
            self._anchors = [a for a in self._anchors if all(map(cached.__contains__, a[2]))]
