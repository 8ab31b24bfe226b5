"""Cheap deterministic token counting and prefix-block hashing.

Tokens are counted as ceil(bytes / BYTES_PER_TOKEN) of the UTF-8 prompt text (about 4 bytes per
token for English BPE tokenizers). Prefix-cache blocks are `block_tokens * BYTES_PER_TOKEN` bytes,
each hash chained on its predecessor, so two prompts share block i only if bytes [0, end_i) agree.
"""

from __future__ import annotations

import hashlib

BYTES_PER_TOKEN = 4


def count_tokens(text_bytes: bytes) -> int:
    """Token count of a prompt: ceil(len / 4), at least 1."""
    return max(1, -(-len(text_bytes) // BYTES_PER_TOKEN))


def block_hasher() -> hashlib._Hash:
    """A fresh running hash for chained block hashes.

    SHA-1 (not for security: the hashes only tell prefixes apart, and 160 bits never collide by
    accident): with the CPU's SHA extensions its digest per 64-byte block costs half of blake2b's, and a
    20-byte digest takes no more memory than a 16-byte one (a long run holds millions)."""
    return hashlib.sha1(usedforsecurity=False)


def block_hashes(text_bytes: bytes, block_tokens: int) -> list[bytes]:
    """Chained hashes of every full block of the prompt (a partial tail block is never cached)."""
    size = block_tokens * BYTES_PER_TOKEN
    out: list[bytes] = []
    h = block_hasher()
    for start in range(0, len(text_bytes) - size + 1, size):
        # one running hash: the digest after block i covers bytes [0, end_i), i.e. the whole chain
        h.update(text_bytes[start : start + size])
        out.append(h.digest())
    return out
