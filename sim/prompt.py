"""Prompts by reference: pieces of ``loadgen.prompts`` text named by (key, tokens), hashed incrementally.

A Locust persona holds every conversation as text and the testbed hashes the whole prompt again on every
request. Both are linear in the context, per request: fine for a real run's few hundred agents, not
for an hour of ten thousand. Here a piece is only its key and size; its bytes (exactly
``prompts.text(key, tokens)``) are made when the prefix-cache hash first reaches them, and each
conversation keeps its chained-hash state, so a request hashes only what it appends. The block hashes
are byte for byte the testbed's (``testbed.tokens.block_hashes`` of the prompt the server would read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen import prompts
from testbed.tokens import BYTES_PER_TOKEN, block_hasher, block_hashes


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


class _Hash:
    """Chained block hashes of a growing byte string: the running hash, the partial tail, the blocks so far."""

    __slots__ = ("blocks", "h", "size", "tail")

    def __init__(self) -> None:
        self.h = block_hasher()
        self.tail = b""
        self.blocks: list[bytes] = []
        self.size = 0

    def copy(self) -> _Hash:
        other = _Hash.__new__(_Hash)
        other.h, other.tail, other.blocks, other.size = self.h.copy(), self.tail, list(self.blocks), self.size
        return other

    def feed(self, data: bytes, block: int) -> None:
        self.size += len(data)
        data = self.tail + data if self.tail else data
        end = len(data) - len(data) % block
        h, out = self.h, self.blocks
        for start in range(0, end, block):
            h.update(data[start : start + block])  # as block_hashes does: one running hash, a digest per block
            out.append(h.digest())
        self.tail = data[end:]


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
    def _parts(self, dialect: str, start: int, with_system: bool) -> list[bytes]:
        """The server-side prompt bytes of messages[start:], after the system part if ``with_system``."""
        # the UTF-8 of each part's text, put together as bytes (a piece's bytes are made as bytes: a task's
        # context is tens of kilobytes, and a str between them was three more copies)
        out: list[bytes] = []
        if dialect == "openai-completions":  # prompt.flat(): the pieces, newline-separated
            first = start == 0 and not self.system
            if with_system and self.system:
                out.append(_data(self.system))
            for i, (_, c) in enumerate(self.messages[start:]):
                sep = b"" if first and i == 0 else b"\n"
                out.append(sep + _data(c))
            return out
        if with_system and self.system:
            out.append(b"system: " + _data(self.system) + b"\n")
        out += [role.encode() + b": " + _data(c) + b"\n" for role, c in self.messages[start:]]
        return out

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
            for data in self._parts(dialect, covered, with_system=False):
                state.feed(data, block)
        self._hash = (dialect, block, len(self.messages), state)
        self._parent = None  # from now on this conversation carries its own state
        return state

    def _system_state(self, dialect: str, block: int) -> _Hash:
        """The hash after the system part: a swarm's shared context is hashed once, not once per task."""
        key = (dialect, block, self.system)
        state = _SYSTEM_STATES.get(key)
        if state is None:
            state = _Hash()
            for data in self._parts(dialect, len(self.messages), with_system=True):
                state.feed(data, block)
            if len(_SYSTEM_STATES) >= _SYSTEM_STATES_MAX:
                _SYSTEM_STATES.clear()
            _SYSTEM_STATES[key] = state
        return state.copy()

    def server_view(self, dialect: str, block_tokens: int) -> tuple[int, list[bytes]]:
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
        if dialect == "anthropic-messages" or prompts._tokenizer is not None:  # sizes only known from the text
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
