"""Cheap deterministic token counting and prefix-block hashing.

Tokens are counted as ceil(bytes / BYTES_PER_TOKEN) of the UTF-8 prompt text (about 4 bytes per
token for English BPE tokenizers). Prefix-cache blocks are `block_tokens * BYTES_PER_TOKEN` bytes,
each identified by the hash of the prompt up to its end, so two prompts share block i only if bytes [0, end_i) agree.
"""

from __future__ import annotations

from array import array

from rushhour.testbed.prefix_hash import block_ids

BYTES_PER_TOKEN = 4


def count_tokens(text_bytes: bytes) -> int:
    """Token count of a prompt: ceil(len / 4), at least 1."""
    return max(1, -(-len(text_bytes) // BYTES_PER_TOKEN))


def block_hashes(text_bytes: bytes, block_tokens: int) -> array[int]:
    """Chained ids of every full block of the prompt (a partial tail block is never cached): the prefix hash of
    each block-long prefix (``testbed.prefix_hash``), so two prompts share block i only if bytes [0, end_i) agree."""
    return block_ids(text_bytes, block_tokens * BYTES_PER_TOKEN)
