"""Random uuid4s in hex, as ``uuid.uuid4().hex``, cut from a buffer of ``os.urandom`` bytes.

A logical request and every attempt take one: thousands a simulated second, where ``uuid.uuid4()`` builds a
``UUID`` object (a Python ``__init__``) and reads the kernel's random bytes for each.
"""

from __future__ import annotations

import os
import threading


class Ids:
    """``uuid.uuid4().hex`` (version 4, RFC 4122 variant) from a buffer; a forked child starts a buffer of its own."""

    SIZE = 16 * 4096
    CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
    SET = (4 << 76) | (0x8000 << 48)

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the buffer (a forked child must not hand out its parent's next ids) and the lock."""
        self.buf, self.at = b"", self.SIZE
        self.lock = threading.Lock()  # real runs' threads and greenlets share one buffer: no id twice

    def __call__(self) -> str:
        with self.lock:
            at = self.at
            if at >= self.SIZE:
                self.buf, at = os.urandom(self.SIZE), 0
            self.at = at + 16
            chunk = self.buf[at : at + 16]
        return f"{(int.from_bytes(chunk, 'big') & self.CLEAR) | self.SET:032x}"


new_id = Ids()
os.register_at_fork(after_in_child=new_id.reset)
