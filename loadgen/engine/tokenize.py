"""A load process's tokenizer work off its loop: each encoding in a thread of its own, the GIL released meanwhile.

With ``target.tokenizer`` every new prompt piece and every request's whole-prompt count is an encoding (a
30k-token prompt: 0.1–0.3 s of CPU). On the loop's thread that stalls every stream's reading and every timer.
``Tokenizer.encode`` uses ``encode_batch``, which releases the GIL while Rust works, so here it runs in one OS
thread of a gevent pool and only the asking greenlet waits. One thread, so encodings queue rather than crowd the
loop's core (benchmarks/tokenized.py measures the stall).

The thread keeps the process's priority. It ran at nice +10 before: that bought the loop little on a quiet core
(stall p99 2.0 vs 2.7 ms, one core, 10 agents/s of 30k-token prompts), and starved the encodings as soon as
another process wanted the core (``tokenized.py --contend``: 0 of 100 agents finished in the 10 s at +10, 10 of
100 at +4, all 100 at 0, stall p99 3.9 / 6.3 / 5.0 ms; the prompt wait p50 8.6 s / 2.3 s / 3 ms). A nicer thread
cannot be made less nice again without privilege, so there is no middle way that adapts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gevent.threadpool import ThreadPool

from rushhour.loadgen.tokens import Tokenizer

_POOL: tuple[int, ThreadPool] | None = None


def _pool() -> ThreadPool:
    """This process's tokenizer thread (made on first use; a forked process makes its own)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPool(1))
    return _POOL[1]


def in_thread(run: Callable[[], Any]) -> Any:
    """``run()`` in the tokenizer thread; the calling greenlet waits for it, the loop goes on."""
    return _pool().apply(run)


def off_loop(tokenizer: Tokenizer | None) -> Tokenizer | None:
    """``tokenizer`` with its encodings run off the loop (None stays None)."""
    if tokenizer is not None:
        tokenizer.offload = in_thread
    return tokenizer
