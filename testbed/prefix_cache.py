"""LRU prefix cache keyed on chained block hashes (vLLM automatic prefix caching)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import accumulate, compress, groupby, islice, repeat, takewhile
from operator import and_, itemgetter, ne, or_, xor

TIP_STEP = 64  # blocks between remembered chain tips (1,024 tokens at 16-token blocks)


class BlockIndex:
    """Which caches hold each block, across a pool's replicas: block hash -> bit mask of replica indices."""

    def __init__(self) -> None:
        self.holders: dict[bytes, int] = {}
        self.caches: list[PrefixCache | None] = []  # by bit position (their chain tips shortcut a shared prefix)
        self._attached = 0
        self._k = 0  # a prefix length (a multiple of TIP_STEP) most caches held whole at the last full walk

    def add(self, blocks: list[bytes], bit: int) -> None:
        """A cache (``bit``) now holds ``blocks`` (ones it did not hold before)."""
        holders = self.holders
        # in C, one lookup for a block no cache held (most of them: a task's own context); a block other
        # caches hold gets its mask or'ed. A prefill inserts a thousand blocks, and evicts as many once full
        masks = list(map(holders.setdefault, blocks, repeat(bit)))
        held = list(map(ne, masks, repeat(bit)))  # held elsewhere already (this cache never held them)
        if any(held):
            holders.update(zip(compress(blocks, held), map(or_, compress(masks, held), repeat(bit)), strict=True))

    def drop(self, blocks: list[bytes], bit: int) -> None:
        """A cache (``bit``) evicted ``blocks`` (ones it held)."""
        holders = self.holders
        masks = list(map(holders.pop, blocks))  # one lookup each: most were this cache's alone
        kept = list(map(ne, masks, repeat(bit)))  # other caches hold these too: back with their masks
        if any(kept):
            holders.update(zip(compress(blocks, kept), map(xor, compress(masks, kept), repeat(bit)), strict=True))

    def leading(self, blocks: Sequence[bytes], replicas: int) -> list[int]:
        """Per replica, the leading blocks its cache holds: ``PrefixCache.match`` of every cache in one walk."""
        caches = self.caches
        k = self._k
        if k and k <= len(blocks) and len(caches) == replicas == self._attached:
            # a swarm's shared context: the caches whose chain tips hold its first k blocks whole (most of
            # them) are known to match that far, so the walk starts there; the others match on their own
            tip = blocks[k - 1]
            known = 0
            for c in caches:
                if c is not None and c._tips.get(k) == tip:
                    known |= c.bit
            if 2 * known.bit_count() >= replicas:
                hits = [0 if c is None or known & c.bit else c.match(blocks, touch=False) for c in caches]
                self._walk(blocks, k, known, hits)
                return hits
        hits = [0] * replicas
        runs = self._walk(blocks, 0, (1 << replicas) - 1, hits)
        # the longest prefix most caches hold: the next walk of a prompt with that prefix starts at its last
        # whole tip, known from their tips (set here for those that do not have it yet: they hold it whole)
        total = k = 0
        for mask, count in runs:
            total += count
            if 2 * mask.bit_count() < replicas:
                break
            k = (total - 1) // TIP_STEP * TIP_STEP
        if k >= TIP_STEP and k <= len(blocks) and len(caches) == replicas == self._attached:
            self._k = k
            tip = blocks[k - 1]
            for c in caches:
                if c is not None and hits[c.bit.bit_length() - 1] >= k:
                    c._tips[k] = tip
        return hits

    def _walk(self, blocks: Sequence[bytes], start: int, mask: int, hits: list[int]) -> list[tuple[int, int]]:
        """The leading blocks of the caches in ``mask``, each known to hold ``blocks[:start]``, into ``hits``;
        the runs of equal masks walked (the first one counts the start as a block)."""
        # the running AND of the holders' masks: after block i, the replicas that hold blocks 0..i. It only
        # loses bits, so it runs through a few values, and a replica's match is how many blocks the runs with
        # its bit cover (walked in C: a long agent context is a thousand blocks, scored for every placement)
        masks = accumulate(map(self.holders.get, islice(blocks, start, None), repeat(0)), and_, initial=mask)
        runs = [(m, len(list(run))) for m, run in groupby(takewhile(bool, masks))]
        total = start - 1  # the initial mask is no block
        for k, (m, count) in enumerate(runs):
            total += count
            gone = m & ~runs[k + 1][0] if k + 1 < len(runs) else m  # the replicas whose match ends here
            while gone:
                low = gone & -gone
                hits[low.bit_length() - 1] = total
                gone ^= low
        return runs


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
        self.index: BlockIndex | None = None  # the pool's index this cache reports its blocks to (``attach``)
        self.bit = 0

    def attach(self, index: BlockIndex, bit: int) -> None:
        """Report this cache's blocks, now and from now on, to ``index`` as ``bit``."""
        self.index, self.bit = index, bit
        at = bit.bit_length() - 1
        index.caches += [None] * (at + 1 - len(index.caches))
        index._attached += index.caches[at] is None
        index.caches[at] = self
        holders = index.holders
        for b in self._blocks:
            holders[b] = holders.get(b, 0) | bit

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, blocks: Sequence[bytes], touch: bool = True) -> int:
        """Number of leading blocks already cached (the longest cached chain)."""
        cached = self._blocks
        tips = self._tips
        start = 0
        if tips:  # skip a prefix already known whole (a swarm's shared context, on every placement)
            size = len(blocks)
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
        for k in range(start + TIP_STEP, n + 1, TIP_STEP):
            tips[k] = blocks[k - 1]
        if touch and n:
            touched = list(blocks[:n])
            deque(map(cached.move_to_end, touched), maxlen=0)
            self._run = touched
        return n

    def insert(self, blocks: Sequence[bytes], limit_blocks: int | None = None) -> None:
        """Add a finished prefill's blocks, then evict down to `limit_blocks` (free KV)."""
        cached = self._blocks
        index = self.index
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
        added = len(cached) - before
        if index is not None and added:
            index.add(list(islice(reversed(cached), added)), self.bit)  # the new ones, just appended
        if added != len(rest):  # some after the first new one were cached: every one of them to the end in turn
            deque(map(cached.move_to_end, rest), maxlen=0)
        self._run = list(blocks)
        cap = self.capacity_blocks if limit_blocks is None else min(self.capacity_blocks, limit_blocks)
        evict = len(cached) - max(0, cap)
        if evict > 0:
            self._tips.clear()
            if len(cached) - evict < len(blocks):
                self._run = None  # the eviction reaches into the prompt's own blocks
            # the least recently used first: popitem(last=False) over and over, in C
            evicted = list(map(itemgetter(0), map(cached.popitem, repeat(False, evict))))
            if index is not None:
                index.drop(evicted, self.bit)
