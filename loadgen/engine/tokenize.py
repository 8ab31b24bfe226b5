"""A load process's tokenizer work off its loop: each encoding in a thread of its own, below the loop's priority.

With ``target.tokenizer`` every new prompt piece and every request's whole-prompt count is an encoding (a
30k-token prompt: 0.1–0.3 s of CPU). On the loop's thread that stalls every stream's reading and every timer.
``Tokenizer.encode`` uses ``encode_batch``, which releases the GIL while Rust works, so here it runs in one OS
thread of a gevent pool and only the asking greenlet waits. That thread runs at a lower priority (nice +10,
Linux sets it per thread): when the loop and the tokenizer both want the core, the loop gets it. One thread, so
encodings queue rather than crowd the loop's core (benchmarks/tokenized.py measures the stall).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from gevent.threadpool import ThreadPool

from rushhour.loadgen.tokens import Tokenizer

NICE = 10  # the tokenizer thread's priority below the loop's

_POOL: tuple[int, ThreadPool] | None = None


def _lower_priority() -> None:
    """Run in the pool's thread: its nice value up by NICE (on Linux ``setpriority(PRIO_PROCESS, 0)`` is the
    calling thread's alone); where it cannot, the thread keeps the process's priority."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICE))


def _pool() -> ThreadPool:
    """This process's tokenizer thread (made on first use; a forked process makes its own)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        pool = ThreadPool(1)
        pool.apply(_lower_priority)
        _POOL = (os.getpid(), pool)
    return _POOL[1]


def in_thread(run: Callable[[], Any]) -> Any:
    """``run()`` in the tokenizer thread; the calling greenlet waits for it, the loop goes on."""
    return _pool().apply(run)


def off_loop(tokenizer: Tokenizer | None) -> Tokenizer | None:
    """``tokenizer`` with its encodings run off the loop (None stays None)."""
    if tokenizer is not None:
        tokenizer.offload = in_thread
    return tokenizer
