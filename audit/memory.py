"""Allocator settings for the audit's process: memory the audit frees goes back to the kernel."""

from __future__ import annotations

import ctypes
import ctypes.util

import pyarrow as pa


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


_LIBC = _libc()
_M_ARENA_MAX = -8  # glibc's malloc.h


def _one_arena() -> None:
    """One heap for every thread (glibc's ``M_ARENA_MAX`` = 1), set before the audit starts any thread.

    The audit's helper threads (the sidecars' checks, the next shard's read, validity beside the folding)
    would each keep what they freed in an arena of their own, which ``malloc_trim`` hardly shrinks
    (measured at 1M attempts: 30–50 MB more peak).
    """
    fn = getattr(_LIBC, "mallopt", None)
    if fn is not None:
        fn(_M_ARENA_MAX, 1)


_one_arena()


def trim() -> None:
    """Hand the heap's free pages back to the kernel (glibc's ``malloc_trim``); a no-op elsewhere.

    Called where a large temporary was just freed (each tier's slices): glibc keeps freed blocks in
    its heap for reuse, so without it the next peak sits on top of the last one's leftovers.
    """
    fn = getattr(_LIBC, "malloc_trim", None)
    if fn is not None:
        fn(0)


def lean_allocators() -> None:
    """Arrow on the system pool: the parser's scratch and dropped tables are freed to glibc, not kept.

    Arrow's default pool (mimalloc) keeps freed segments for reuse, so the audit's peak RSS carried
    every arrow temporary it ever made (measured at 1M attempts: ~100 MB). Process-wide and set
    once; a fixed glibc mmap threshold did as well for memory but cost ~15 % more CPU (a page fault
    per fresh page of every column-sized array), so ``trim`` at chosen points is used instead.
    """
    pa.set_memory_pool(pa.system_memory_pool())
