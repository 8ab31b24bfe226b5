"""Locust's master↔worker transport, sealed with the run's secret (HMAC-SHA256 on every frame, both ways).

Locust trusts whoever reaches its master port: it dispatches any frame and takes the sender's id from a
field of the message. ``install`` swaps Locust's ZeroMQ ``rpc.Server``/``rpc.Client`` for these, so
every frame, Locust's own (ready, spawn, heartbeat, stats, quit) and rushhour's (shards, budget,
breakers), is authenticated before Locust sees it:

1. the worker opens with ``HELLO`` (its fresh nonce); the master answers ``CHALLENGE``: its run session,
   a fresh nonce for this worker and a tag over both nonces. The worker refuses a master whose tag is
   wrong (a fake master, or another secret) or that answers anything else, in one line, before it has
   sent a single Locust message or received the scenario;
2. every later frame is ``MSG [seq, type, payload, tag]``, the tag over (direction, session, nonce, the
   worker's connection identity, seq, type, payload); ``seq`` rises strictly per sender (no replay);
3. the master drops, and counts by reason, every frame that fails (``rejected``, written to the run
   folder at the end: ``auth-master.json``); it never sends to a peer that has not proved the secret
   (so a fake worker never gets the scenario); the message's ``node_id`` is replaced by the connection's
   authenticated identity, so nobody speaks under another worker's id; a frame above ``MAX_FRAME`` is
   refused by ZeroMQ itself before it is read into memory.

Authentication, not encryption: the scenario travels readable (keep the port private, docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import zmq.error as zmqerr
import zmq.green as zmq
from gevent.event import Event
from locust.exception import RPCError, RPCSendError
from locust.rpc import zmqrpc as rpc  # what locust.runners builds its sockets from
from locust.rpc.protocol import Message

from rushhour.loadgen import runkey

HELLO, CHALLENGE, MSG = b"RH1H", b"RH1C", b"RH1M"
MAX_FRAME = 4 << 20  # a shard batch is <= 1 MiB (loadgen/ship.py); Locust's own frames are small
MAX_FRAME_FROM_MASTER = 64 << 20  # the spawn carries the resolved scenario (its files are bounded far below)
MAX_PENDING = 256  # challenges outstanding (a HELLO costs the master one entry, the oldest goes)
MAX_NAMED_ROGUES = 20
WORKER_QUEUE = 64  # a worker's messages held until its master proved the secret
REFUSED_EXIT = 2


class Unsealed(Exception):
    """A frame that fails authentication (its text is the reason counted)."""


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)  # the frame is bounded by MAXMSGSIZE


def _message(kind: str, payload: bytes) -> Message:
    """Locust's message out of an authenticated payload; Unsealed when it is not one of kind ``kind``."""
    try:
        msg = Message.unserialize(payload)
    except Exception as exc:  # msgpack errors, a tuple of the wrong length: never the receive loop's problem
        raise Unsealed("malformed") from exc
    if not isinstance(msg.type, str) or msg.type != kind:
        raise Unsealed("malformed")
    return msg


def _envelope(frame: bytes) -> tuple[int, str, bytes, bytes]:
    if not frame.startswith(MSG):
        raise Unsealed("untagged")
    try:
        seq, kind, payload, mac = _unpack(frame[len(MSG):])
    except Exception as exc:
        raise Unsealed("malformed") from exc
    if not (isinstance(seq, int) and isinstance(kind, str) and isinstance(payload, bytes) and isinstance(mac, bytes)):
        raise Unsealed("malformed")
    return seq, kind, payload, mac


@dataclass(slots=True)
class _Peer:
    nonce: bytes
    last_seq: int = 0  # the highest seq seen from the worker
    out_seq: int = 0  # the master's own seq towards it


class SealedServer(rpc.Server):
    """The master's end: answers HELLOs, accepts only tagged frames from workers that proved the secret."""

    def __init__(self, host: str, port: int) -> None:
        self.key = runkey.secret_from()  # ValueError: no secret, no master (the locustfile says it in one line)
        super().__init__(host, port)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)
        self.session = os.urandom(16)
        self.peers: dict[str, _Peer] = {}
        self.pending: OrderedDict[tuple[str, bytes], bool] = OrderedDict()  # (identity, master nonce)
        self.rejected: Counter[str] = Counter()
        self.rogues: dict[str, int] = {}
        if _SERVERS:  # Locust rebuilt its socket after an error: same run, same session, its workers stay in
            self.session, self.peers, self.pending = _SERVERS[-1].session, _SERVERS[-1].peers, _SERVERS[-1].pending
        _SERVERS.append(self)

    def _reject(self, addr: str, reason: str) -> None:
        self.rejected[reason] += 1
        if addr in self.rogues or len(self.rogues) < MAX_NAMED_ROGUES:
            self.rogues[addr] = self.rogues.get(addr, 0) + 1
        if self.rejected[reason] in (1, 10, 100, 1000, 10000):  # the log says so, without flooding it
            with contextlib.suppress(OSError):
                os.write(2, f"rushhour: dropped {self.rejected[reason]} {reason} frame(s) on the master port "
                            f"(latest from {addr[:80]!r}): not authenticated with the run's secret\n".encode(
                                errors="replace"))

    def recv_from_client(self) -> tuple[str, Message]:
        while True:
            try:
                frames = self.socket.recv_multipart()
            except zmqerr.ZMQError as exc:
                raise RPCError("ZMQ network broken") from exc
            addr = "?"
            try:
                if len(frames) != 2:
                    raise Unsealed("malformed")
                addr = frames[0].decode()
                got = self._open(addr, frames[1])
            except (Unsealed, UnicodeDecodeError) as exc:
                self._reject(addr, str(exc) if isinstance(exc, Unsealed) else "malformed")
                continue
            if got is not None:
                return addr, got

    def _open(self, addr: str, frame: bytes) -> Message | None:
        if frame.startswith(HELLO):
            self._challenge(addr, frame[len(HELLO):])
            return None
        seq, kind, payload, mac = _envelope(frame)
        peer = self.peers.get(addr)
        nonces = [peer.nonce] if peer is not None else []
        nonces += [n for (who, n) in self.pending if who == addr]
        for nonce in nonces:
            if runkey.verify(self.key, mac, b"w2m", self.session, nonce, addr, seq, kind, payload):
                break
        else:
            raise Unsealed("bad_tag")
        if peer is None or peer.nonce != nonce:  # the first tagged frame under a new nonce: the worker is in
            self.pending.pop((addr, nonce), None)
            peer = self.peers[addr] = _Peer(nonce)
        if seq <= peer.last_seq:
            raise Unsealed("replayed")
        peer.last_seq = seq
        msg = _message(kind, payload)
        msg.node_id = addr  # the connection's authenticated identity, never the message's own claim
        return msg

    def _challenge(self, addr: str, body: bytes) -> None:
        try:
            identity, worker_nonce = _unpack(body)
        except Exception as exc:
            raise Unsealed("malformed") from exc
        if identity != addr or not isinstance(worker_nonce, bytes) or len(worker_nonce) != 16:
            raise Unsealed("malformed")
        nonce = os.urandom(16)
        self.pending[(addr, nonce)] = True
        while len(self.pending) > MAX_PENDING:
            self.pending.popitem(last=False)
        mac = runkey.tag(self.key, b"challenge", self.session, addr, worker_nonce, nonce)
        with contextlib.suppress(zmqerr.ZMQError):
            self.socket.send_multipart([addr.encode(), CHALLENGE + msgpack.packb([self.session, nonce, mac])],
                                       zmq.NOBLOCK)

    def send_to_client(self, msg: Message) -> None:
        peer = self.peers.get(msg.node_id)
        if peer is None:  # never talk to a peer that has not proved the secret (a fake worker gets nothing)
            self.rejected["unsent_to_unauthenticated"] += 1
            return
        peer.out_seq += 1
        payload = msg.serialize()
        mac = runkey.tag(self.key, b"m2w", self.session, peer.nonce, msg.node_id, peer.out_seq, msg.type, payload)
        try:
            self.socket.send_multipart([msg.node_id.encode(),
                                        MSG + msgpack.packb([peer.out_seq, msg.type, payload, mac])])
        except zmqerr.ZMQError as exc:
            raise RPCSendError("ZMQ sent failure") from exc

    def account(self) -> dict[str, Any]:
        """What was dropped, by reason, and the connection identities it came from (run evidence)."""
        rejected = {k: v for k, v in sorted(self.rejected.items()) if k != "unsent_to_unauthenticated"}
        return {"authenticated_workers": sorted(self.peers), "rejected": rejected,
                "rejected_total": sum(rejected.values()), "rejected_from": dict(sorted(self.rogues.items())),
                "unsent_to_unauthenticated": self.rejected["unsent_to_unauthenticated"]}


class SealedClient(rpc.Client):
    """The worker's end: proves nothing until the master has proved the secret; then tags every frame."""

    def __init__(self, host: str, port: int, identity: str) -> None:
        self.key = runkey.secret_from()
        super().__init__(host, port, identity)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_FROM_MASTER)  # before the master proved anything
        self.identity = identity
        self.master = f"{host}:{port}"
        self.hello_nonce = os.urandom(16)
        self.session: bytes | None = None
        self.nonce = b""
        self.seq = 0
        self.last_seq = 0
        self.rejected: Counter[str] = Counter()
        self.queue: deque[Message] = deque(maxlen=WORKER_QUEUE)
        self.proved = Event()
        self._hello_at = 0.0

    def send(self, msg: Message) -> None:
        if self.session is None:
            if msg.type == "client_ready":  # Locust says it again when no ack came: one is enough
                self.queue = deque((m for m in self.queue if m.type != "client_ready"), maxlen=WORKER_QUEUE)
            self.queue.append(msg)
            if time.monotonic() - self._hello_at >= 1.0:
                self._hello_at = time.monotonic()
                with contextlib.suppress(zmqerr.ZMQError):
                    self.socket.send(HELLO + msgpack.packb([self.identity, self.hello_nonce]), zmq.NOBLOCK)
            return
        self._send(msg)

    def _send(self, msg: Message) -> None:
        assert self.session is not None
        self.seq += 1
        payload = msg.serialize()
        mac = runkey.tag(self.key, b"w2m", self.session, self.nonce, self.identity, self.seq, msg.type, payload)
        try:
            self.socket.send(MSG + msgpack.packb([self.seq, msg.type, payload, mac]), zmq.NOBLOCK)
        except zmqerr.ZMQError as exc:
            raise RPCSendError("ZMQ sent failure") from exc

    def recv(self) -> Message:
        while True:
            try:
                frame = self.socket.recv()
            except zmqerr.ZMQError as exc:
                raise RPCError("ZMQ network broken") from exc
            try:
                got = self._open(frame)
            except Unsealed as exc:
                self.rejected[str(exc)] += 1
                if self.session is None:  # whoever answers there has not proved the secret: never trust it
                    refuse(self.master, str(exc))
                continue
            if got is not None:
                return got

    def _open(self, frame: bytes) -> Message | None:
        if frame.startswith(CHALLENGE):
            if self.session is not None:
                return None  # the answer to a HELLO repeated while the master was starting
            try:
                session, nonce, mac = _unpack(frame[len(CHALLENGE):])
            except Exception as exc:
                raise Unsealed("malformed challenge") from exc
            if not (isinstance(session, bytes) and isinstance(nonce, bytes) and runkey.verify(
                    self.key, mac, b"challenge", session, self.identity, self.hello_nonce, nonce)):
                raise Unsealed("a challenge not tagged with the run's secret")
            self.session, self.nonce = session, nonce
            self.proved.set()
            queued, self.queue = list(self.queue), deque(maxlen=WORKER_QUEUE)
            for msg in queued:
                self._send(msg)
            return None
        if self.session is None:
            raise Unsealed("a message before proving the run's secret")
        seq, kind, payload, mac = _envelope(frame)
        if not runkey.verify(self.key, mac, b"m2w", self.session, self.nonce, self.identity, seq, kind, payload):
            raise Unsealed("bad_tag")
        if seq <= self.last_seq:
            raise Unsealed("replayed")
        self.last_seq = seq
        return _message(kind, payload)


def refuse(master: str, reason: str) -> None:
    """A worker whose master cannot prove the run's secret: one line, exit 2, nothing sent or written."""
    with contextlib.suppress(OSError):
        os.write(2, (f"error: refusing the master at {master}: it cannot prove the run's secret "
                     f"({runkey.SECRET_ENV}): {reason}; a fake master, or another run's secret\n").encode())
    os._exit(REFUSED_EXIT)


_SERVERS: list[SealedServer] = []


def install() -> None:
    """Locust's runners build their sockets through ``locust.rpc``: from now on they are sealed ones. A
    process without a usable secret stops here, in one line (exit 2), before it listens or connects."""

    def server(host: str, port: int) -> SealedServer:
        try:
            return SealedServer(host, port)
        except ValueError as exc:
            _die(str(exc))
            raise

    def client(host: str, port: int, identity: str) -> SealedClient:
        try:
            return SealedClient(host, port, identity)
        except ValueError as exc:
            _die(str(exc))
            raise

    rpc.Server, rpc.Client = server, client  # type: ignore[misc,assignment]


def _die(line: str) -> None:
    with contextlib.suppress(OSError):
        sys.stderr.write(f"error: {line}\n")
        sys.stderr.flush()
    os._exit(REFUSED_EXIT)


def write_account(run_dir: Path) -> dict[str, Any] | None:
    """The master's account of dropped frames in the run folder (temp file + rename), for run.json; every
    server of this process counts (Locust builds a new one when it resets a broken connection)."""
    if not _SERVERS:
        return None
    account = _SERVERS[-1].account()
    for older in _SERVERS[:-1]:
        for reason, count in older.account()["rejected"].items():
            account["rejected"][reason] = account["rejected"].get(reason, 0) + count
            account["rejected_total"] += count
    with contextlib.suppress(OSError):
        tmp = Path(run_dir) / (runkey.AUTH_FILE + ".tmp")
        tmp.write_text(json.dumps(account, sort_keys=True))
        tmp.replace(Path(run_dir) / runkey.AUTH_FILE)
    return account
