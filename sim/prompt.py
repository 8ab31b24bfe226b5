"""Prompts by reference: pieces of ``loadgen.prompts`` text named by (key, tokens), hashed incrementally.

A Locust persona holds every conversation as text and the testbed hashes the whole prompt again on every
request. Both are linear in the context, per request: fine for a real run's few hundred agents, not
for an hour of ten thousand. Here a piece is only its key and size; its bytes (exactly
``prompts.text(key, tokens)``) are made when the prefix-cache hash first reaches them, and each
conversation keeps its chained-hash state, so a request hashes only what it appends. The block hashes
are byte for byte the testbed's (``testbed.tokens.block_hashes`` of the prompt the server would read).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rushhour.loadgen import prompts
from rushhour.testbed.prefix_hash import MASK, POWERS, block_ends, hash_short, power, prefix_table
from rushhour.testbed.tokens import BYTES_PER_TOKEN, block_hashes


@dataclass(frozen=True, slots=True)
class Piece:
    """``prompts.text(key, tokens)`` by reference: the same bytes when asked, ``4 × tokens`` of them."""

    key: str
    tokens: int

    def __len__(self) -> int:
        return max(1, self.tokens) * BYTES_PER_TOKEN

    def text(self) -> str:
        return prompts.text(self.key, self.tokens)

    def data(self) -> bytes:
        """``text().encode()``."""
        return prompts.text_bytes(self.key, self.tokens)


Content = Piece | str


def piece(key: str, tokens: int) -> Piece:
    """A piece of deterministic text (see ``loadgen.prompts.text``)."""
    return Piece(key, max(1, tokens))


def _text(c: Content) -> str:
    return c if isinstance(c, str) else c.text()


def _data(c: Content) -> bytes:
    return c.encode() if isinstance(c, str) else c.data()


def _nbytes(c: Content) -> int:
    """UTF-8 bytes of a piece of content (a ``Piece`` is ``4 × tokens`` ASCII bytes without a tokenizer)."""
    return len(c.encode()) if isinstance(c, str) else len(c)


_SHORT = 64  # a part this long or shorter is hashed byte by byte; a longer one in array passes
_FEW = 8  # a piece with this many block ends or fewer gets its ids one by one; more, in array passes


class _BaseTable:
    """Prefix hashes of ``prompts.base()``, as numbers and as a numpy view of the same memory (built once)."""

    at: ClassVar[array[int] | None] = None
    np: ClassVar[np.ndarray]

    @classmethod
    def get(cls) -> array[int]:
        if cls.at is None:
            data = prompts.base()
            table = np.zeros(len(data) + 1, dtype=np.uint64)
            chunk = 1 << 16  # in chunks, composed: the power tables stay a chunk long
            for start in range(0, len(data), chunk):
                part = data[start : start + chunk]
                local = prefix_table(part)
                table[start + 1 : start + len(part) + 1] = (
                    int(table[start]) * POWERS.upto(len(part))[1 : len(part) + 1] + local[1:])
            cls.at = array("Q", table.tobytes())
            cls.np = np.frombuffer(cls.at, dtype=np.uint64)
        return cls.at


class _Hash:
    """A growing prompt's hash: its bytes so far, H of them (``testbed.prefix_hash``), the ids of its whole blocks
    (unsigned 64-bit, in an ``array``: ten thousand agents' contexts are millions of ids, which as a list would be
    an object each, and a list the cyclic collector walks id by id)."""

    __slots__ = ("blocks", "h", "size")

    def __init__(self) -> None:
        self.h = 0
        self.blocks: array[int] = array("Q")
        self.size = 0

    def copy(self) -> _Hash:
        other = _Hash.__new__(_Hash)
        other.h, other.blocks, other.size = self.h, self.blocks[:], self.size
        return other

    def feed(self, part: bytes | Piece, block: int) -> None:
        """Append a part of the prompt: literal bytes, or a piece by reference."""
        if type(part) is bytes:
            self._feed_bytes(part, block)
            return
        assert isinstance(part, Piece)
        layout = prompts.sized_layout(part.key, len(part)) if prompts.tokenizer() is None else None
        if layout is None:  # exact token counts (or a text longer than the base): from the bytes
            self._feed_bytes(part.data(), block)
        else:
            self._feed_window(*layout, block)

    def _feed_bytes(self, data: bytes, block: int) -> None:
        n = len(data)
        h0, ends = self.h, block_ends(self.size, n, block)
        if n <= _SHORT:
            h, done = h0, 0
            for m in ends:
                h = hash_short(data[done:m], h)
                self.blocks.append(h)
                done = m
            self.h = hash_short(data[done:], h)
        else:
            table = prefix_table(data)
            if ends:
                ids = h0 * POWERS.np[ends.start : n + 1 : block] + table[ends.start :: block]
                self.blocks.frombytes(ids.tobytes())
            self.h = (h0 * power(n) + int(table[n])) & MASK
        self.size += n

    def _feed_window(self, tag: bytes, start: int, length: int, block: int) -> None:
        """A piece: ``tag`` then ``length`` bytes of the base from ``start``. A block end m bytes into it, past the
        tag (t bytes), has the id ``h0·P^m + H(tag)·P^k + H(base[start : start + k])`` with k = m − t, and
        ``H(base[a:b]) = B[b] − B[a]·P^(b−a)`` from the base's prefix table B: ``(h0·P^t + H(tag) − B[start])·P^k +
        B[start + k]``, and the k of successive block ends step by a block (strided views, no gather)."""
        t = len(tag)
        n = t + length
        base = _BaseTable.get()
        h0 = self.h
        htag = hash_short(tag)
        blocks = self.blocks
        first = block - self.size % block  # the first block end, bytes into the piece
        while first <= t and first <= n:  # a block ends inside the tag (blocks shorter than a tag: more than one)
            blocks.append(hash_short(tag[:first], h0))
            first += block
        if first <= n:
            scale = (h0 * power(t) + htag - base[start]) & MASK
            k0, count = first - t, (n - first) // block + 1
            if count <= _FEW:
                POWERS.upto(n)
                pw = POWERS.at
                for k in range(k0, k0 + count * block, block):
                    blocks.append((scale * pw[k] + base[start + k]) & MASK)
            else:
                stop = k0 + (count - 1) * block + 1
                ids = scale * POWERS.upto(stop)[k0:stop:block] + _BaseTable.np[start + k0 : start + stop : block]
                blocks.frombytes(ids.tobytes())
        hbody = (base[start + length] - base[start] * power(length)) & MASK
        self.h = (h0 * power(n) + htag * power(length) + hbody) & MASK
        self.size += n


_SYSTEM_STATES: dict[tuple[str, int, Content], _Hash] = {}
_SYSTEM_STATES_MAX = 256


class Conversation:
    """An append-only prompt (``loadgen.prompts.Conversation``'s shape) whose pieces are references."""

    __slots__ = ("_hash", "_parent", "_shared", "_sizes", "messages", "system")

    def __init__(self, system: Content = "", messages: list[tuple[str, Content]] | None = None) -> None:
        self.system = system
        self.messages: list[tuple[str, Content]] = messages if messages is not None else []
        self._hash: tuple[str, int, int, _Hash] | None = None  # (dialect, block, messages covered, state)
        self._parent: Conversation | None = None
        self._shared = False  # server_view handed out the state's block list (a job holds it now)
        # (messages counted, their len, UTF-8 bytes and role characters): sizes are asked per attempt and per
        # step, and a long task's context is dozens of messages
        self._sizes = (0, 0, 0, 0)

    def with_user(self, content: Content) -> Conversation:
        """A copy with one more user message; it starts its hash from this conversation's."""
        out = Conversation(self.system, [*self.messages, ("user", content)])
        out._parent = self
        out._sizes = self._sizes  # its counts cover the same first messages
        return out

    def append(self, role: str, content: Content) -> None:
        if self._shared and self._hash is not None:  # copy on write: a job in flight holds the old list
            d, b, covered, state = self._hash
            self._hash, self._shared = (d, b, covered, state.copy()), False
        self.messages.append((role, content))

    def _sums(self) -> tuple[int, int, int]:
        """(len, UTF-8 bytes, role characters) summed over the messages, counted once each (append-only)."""
        counted, chars, nbytes, roles = self._sizes
        msgs = self.messages
        if counted != len(msgs):
            if counted > len(msgs):  # pragma: no cover - not append-only after all: count again
                counted = chars = nbytes = roles = 0
            for role, c in msgs[counted:]:
                chars += len(c)
                nbytes += _nbytes(c)
                roles += len(role)
            self._sizes = (len(msgs), chars, nbytes, roles)
        return chars, nbytes, roles

    @property
    def nbytes(self) -> int:
        return len(self.system) + self._sums()[0]

    @property
    def tokens(self) -> int:
        return -(-self.nbytes // BYTES_PER_TOKEN)

    # ---- what the testbed reads -------------------------------------------------------------
    def _segments(self, dialect: str, start: int, with_system: bool) -> list[bytes | Piece]:
        """The server-side prompt of messages[start:], after the system part if ``with_system``: literal bytes
        (roles, separators, text given as str) and pieces by reference, in order."""
        out: list[bytes | Piece] = []
        lit = b""  # literal bytes not yet out
        if dialect == "openai-completions":  # prompt.flat(): the pieces, newline-separated
            first = start == 0 and not self.system
            contents = [(False, self.system)] if with_system and self.system else []
            contents += [(not (first and i == 0), c) for i, (_, c) in enumerate(self.messages[start:])]
            for sep, c in contents:
                if sep:
                    lit += b"\n"
                if isinstance(c, str):
                    lit += c.encode()
                else:
                    if lit:
                        out.append(lit)
                        lit = b""
                    out.append(c)
        else:
            turns = [("system", self.system)] if with_system and self.system else []
            turns += self.messages[start:]
            for role, c in turns:
                lit += role.encode() + b": "
                if isinstance(c, str):
                    lit += c.encode()
                else:
                    out.append(lit)
                    out.append(c)
                    lit = b""
                lit += b"\n"
        if lit:
            out.append(lit)
        return out

    def _parts(self, dialect: str, start: int, with_system: bool) -> list[bytes]:
        """``_segments`` as bytes."""
        return [p if isinstance(p, bytes) else p.data() for p in self._segments(dialect, start, with_system)]

    def _state(self, dialect: str, block: int) -> _Hash:
        cached = self._hash
        if cached is not None and cached[0] == dialect and cached[1] == block:
            state, covered = cached[3], cached[2]
        else:
            parent = self._parent
            if parent is not None and parent.messages == self.messages[: len(parent.messages)]:
                state, covered = parent._state(dialect, block).copy(), len(parent.messages)
            else:
                state, covered = self._system_state(dialect, block), 0
        if covered < len(self.messages):
            for part in self._segments(dialect, covered, with_system=False):
                state.feed(part, block)
        self._hash = (dialect, block, len(self.messages), state)
        self._parent = None  # from now on this conversation carries its own state
        return state

    def _system_state(self, dialect: str, block: int) -> _Hash:
        """The hash after the system part: a swarm's shared context is hashed once, not once per task."""
        key = (dialect, block, self.system)
        state = _SYSTEM_STATES.get(key)
        if state is None:
            state = _Hash()
            for part in self._segments(dialect, len(self.messages), with_system=True):
                state.feed(part, block)
            if len(_SYSTEM_STATES) >= _SYSTEM_STATES_MAX:
                _SYSTEM_STATES.clear()
            _SYSTEM_STATES[key] = state
        return state.copy()

    def server_view(self, dialect: str, block_tokens: int) -> tuple[int, array[int]]:
        """(prompt bytes as the testbed reads them, their prefix-cache block hashes)."""
        if dialect == "anthropic-messages":  # merged turns and a bare system line: the whole prompt, once
            raw = self.server_prompt(dialect)
            return len(raw), block_hashes(raw, block_tokens)
        state = self._state(dialect, block_tokens * BYTES_PER_TOKEN)
        self._shared = True  # no copy: ten thousand agents' contexts are gigabytes of block lists
        return state.size, state.blocks

    def server_size(self, dialect: str) -> int:
        """The prompt's bytes as the testbed reads them (``server_view``'s size) without hashing anything: an
        attempt the gateway turns away never needs its blocks."""
        cached = self._hash
        if cached is not None and cached[0] == dialect and cached[2] == len(self.messages):
            return cached[3].size
        if dialect == "anthropic-messages" or prompts.tokenizer() is not None:  # sizes only known from the text
            return len(self.server_prompt(dialect))
        if dialect == "openai-completions":  # the pieces, newline-separated
            n = _nbytes(self.system) if self.system else 0
            seps = len(self.messages) - (0 if self.system else 1)
            return n + self._sums()[1] + max(0, seps)
        n = _nbytes(self.system) + 9 if self.system else 0  # "system: …\n"
        _, nbytes, roles = self._sums()
        return n + roles + 3 * len(self.messages) + nbytes  # "role: …\n" per message

    def server_prompt(self, dialect: str) -> bytes:
        """The whole prompt as the testbed's server reads it from the request body (tests, Anthropic)."""
        if dialect == "anthropic-messages":
            parts = [f"system: {_text(self.system)}"] if self.system else []
            merged: list[tuple[str, str]] = []
            for role, c in self.messages:  # the client merges same-role neighbours (dialects._alternating)
                if merged and merged[-1][0] == role:
                    merged[-1] = (role, merged[-1][1] + "\n" + _text(c))
                else:
                    merged.append((role, _text(c)))
            if not merged or merged[0][0] != "user":
                merged.insert(0, ("user", "."))
            return "".join(parts + [f"{r}: {c}\n" for r, c in merged]).encode()
        return b"".join(self._parts(dialect, 0, with_system=True))


def from_text(conv: Any) -> Conversation:
    """A ``loadgen.prompts.Conversation`` (trace replay builds one) as a simulated one."""
    return Conversation(conv.system, list(conv.messages))
