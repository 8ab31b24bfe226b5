"""Buffered ids are ``uuid.uuid4().hex`` of the same random bytes; a forked child does not repeat its parent's."""

from __future__ import annotations

import os
import sys
import threading
import uuid

import pytest

from rushhour.loadgen import ids


def test_an_id_is_the_uuid4_of_its_sixteen_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[bytes] = []
    real = os.urandom

    def urandom(n: int) -> bytes:
        drawn.append(real(n))
        return drawn[-1]

    monkeypatch.setattr(ids.os, "urandom", urandom)
    gen = ids.Ids()
    got = [gen() for _ in range(2 * ids.Ids.SIZE // 16 + 5)]  # across three buffers
    raw = b"".join(drawn)
    assert got == [uuid.UUID(bytes=raw[i * 16 : i * 16 + 16], version=4).hex for i in range(len(got))]
    assert all(uuid.UUID(hex=x).version == 4 and uuid.UUID(hex=x).variant == uuid.RFC_4122 for x in got)


def test_threads_never_share_an_id() -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    gen = ids.Ids()
    out: list[list[str]] = [[] for _ in range(4)]

    def take(mine: list[str]) -> None:
        mine.extend(gen() for _ in range(20_000))

    threads = [threading.Thread(target=take, args=(o,)) for o in out]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    every = [x for o in out for x in o]
    assert len(set(every)) == len(every)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_draws_its_own_buffer() -> None:
    ids.new_id()  # the parent's buffer is filled
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, ids.new_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    assert child != ids.new_id()  # without the reset, both would take the buffer's next 16 bytes
