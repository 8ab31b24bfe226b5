"""Prefix hashes of byte strings that compose: a prompt's prefix-cache block ids from its parts.

``H(s) = s[0]·P^(n-1) + … + s[n-1] mod 2**64`` (Horner's rule over the bytes, P a fixed odd constant). It
composes, ``H(x + y) = H(x)·P^|y| + H(y)``, and with a table of a string's prefix hashes any slice is O(1):
``H(s[a:b]) = H(s[:b]) − H(s[:a])·P^(b−a)``. Block i of a prompt is identified by H of its first (i + 1) blocks'
bytes (vLLM chains its block hashes so, for the same reason): two prompts share it only if those bytes agree,
up to a collision of a 64-bit hash. The testbed's server computes the ids from the bytes it reads
(``block_ids``); the simulator from a conversation's parts, most of them slices of one base text, without
making or hashing their bytes (``sim/prompt.py``). Both are the same numbers, tested.
"""

from __future__ import annotations

from array import array

import numpy as np

P = 0x9E3779B97F4A7C15  # odd: invertible mod 2**64
MASK = (1 << 64) - 1
_R = pow(P, -1, 1 << 64)


class _Powers:
    """``base**k mod 2**64`` for k = 0 … n, as numbers (``at``) and as a numpy view of the same memory (``np``)."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.at = array("Q", [1])
        self.np = np.frombuffer(self.at, dtype=np.uint64)

    def upto(self, n: int) -> np.ndarray:
        """The powers 0 … n at least (grown by doubling)."""
        if len(self.at) <= n:
            size = max(n + 1, 2 * len(self.at), 4096)
            table = np.full(size, self.base, dtype=np.uint64)
            table[0] = 1
            np.cumprod(table, out=table)  # wraps mod 2**64, as the hash does
            self.at = array("Q", table.tobytes())
            self.np = np.frombuffer(self.at, dtype=np.uint64)
        return self.np


POWERS = _Powers(P)
_INVERSES = _Powers(_R)


def power(n: int) -> int:
    """``P**n mod 2**64``."""
    if n >= len(POWERS.at):
        POWERS.upto(n)
    return POWERS.at[n]


def hash_short(data: bytes, h: int = 0) -> int:
    """``H(x + data)`` from ``h = H(x)``, byte by byte (for a few bytes: a role's prefix, a tag)."""
    for c in data:
        h = (h * P + c) & MASK
    return h


def prefix_table(data: bytes) -> np.ndarray:
    """``H(data[:i])`` for i = 0 … len(data) (uint64): ``P^(i-1) · Σ_{k<i} data[k]·P^-k``, in a few array passes."""
    n = len(data)
    out = np.zeros(n + 1, dtype=np.uint64)
    if n:
        pw = POWERS.upto(n)
        inv = _INVERSES.upto(n)
        sums = np.cumsum(np.frombuffer(data, dtype=np.uint8).astype(np.uint64) * inv[:n])
        np.multiply(pw[:n], sums, out=out[1:])
    return out


def block_ids(data: bytes, block_bytes: int) -> array[int]:
    """The ids of every whole block of ``data`` (a prompt): H of each block-long prefix, as unsigned 64-bit numbers
    (an ``array``: no object per id, and nothing the cyclic collector has to walk)."""
    if len(data) < block_bytes:
        return array("Q")
    return array("Q", prefix_table(data)[block_bytes::block_bytes].tobytes())


def block_ends(offset: int, n: int, block: int) -> range:
    """The lengths m in 1 … n at which ``offset + m`` ends a block (a segment of n bytes at ``offset``)."""
    return range(block - offset % block, n + 1, block)
