"""Rogue peers of a Locust master or worker, on loopback: raw ZeroMQ frames as an attacker would send them.

Locust's wire format is a msgpack ``(type, data, node_id)`` per frame; rushhour's sealed transport
(loadgen/engine/sealed.py) wraps it in ``RH1M [seq, type, payload, tag]``. A rogue knows the format
and every id it can read (workers.jsonl), never the run's secret.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import msgpack
import zmq

LOCUST_VERSION = metadata.version("locust")


def plain(kind: str, data: Any, node_id: str) -> bytes:
    """A Locust message as Locust itself frames it (what the review's rogues sent)."""
    return msgpack.packb((kind, data, node_id))


def forged(kind: str, data: Any, node_id: str, seq: int = 1) -> bytes:
    """A sealed-looking frame with a tag made without the secret."""
    return b"RH1M" + msgpack.packb([seq, kind, plain(kind, data, node_id), os.urandom(32)])


def hello(identity: str) -> bytes:
    return b"RH1H" + msgpack.packb([identity, os.urandom(16)])


@dataclass
class Peer:
    """A DEALER connected to the master port under ``identity``, keeping every frame it is sent."""

    port: int
    identity: str
    got: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, self.identity.encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 100_000)
        self.sock.connect(f"tcp://127.0.0.1:{self.port}")

    def send(self, *frames: bytes) -> None:
        for frame in frames:
            self.sock.send(frame)

    def send_multipart(self, parts: list[bytes]) -> None:
        self.sock.send_multipart(parts)

    def drain(self, wait_s: float = 0.2) -> list[bytes]:
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1):
                self.got.append(self.sock.recv())
        return self.got

    def close(self) -> None:
        self.sock.close(0)


class FakeMaster:
    """A ROUTER on a loopback port that answers every frame as a plain Locust master would, or with a
    challenge under a wrong secret; it records what the worker sent."""

    def __init__(self, port: int, mode: str, spawn: dict[str, Any]) -> None:
        self.port, self.mode, self.spawn = port, mode, spawn
        self.frames: list[bytes] = []
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(f"tcp://127.0.0.1:{port}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.sock.poll(100):
                continue
            addr, frame = self.sock.recv_multipart()[:2]
            self.frames.append(frame)
            if self.mode == "wrong_secret" and frame.startswith(b"RH1H"):
                self.sock.send_multipart([addr, b"RH1C" + msgpack.packb([os.urandom(16), os.urandom(16),
                                                                          os.urandom(32)])])
            else:  # a plain Locust master: ack and spawn at once, with its own target and run folder
                self.sock.send_multipart([addr, plain("ack", {"index": 0}, addr.decode())])
                self.sock.send_multipart([addr, plain("spawn", self.spawn, addr.decode())])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close(0)
