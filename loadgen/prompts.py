"""Deterministic prompt text of n tokens (exact with the scenario's tokenizer, else ≈ 4n bytes), same bytes every run.

Prefix caches (the testbed's and real ones) hash the prompt in blocks, so a conversation that
re-sends its history must re-send it byte for byte: every piece of text here is a pure function of
(key, token count), and conversations are lists of such pieces that only ever grow at the end.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rushhour.loadgen.token_size import BYTES_PER_TOKEN as BYTES_PER_TOKEN  # its home; the callers read it here

if TYPE_CHECKING:
    from rushhour.loadgen.tokens import Tokenizer

_BASE_BYTES = 1 << 20

_WORDS_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will more can "
    "out up other into time only some could new them these than first two may then do any like my "
    "now over such our man me even most made after also did many before must through back years "
    "where much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used "
    "take three queue token batch cache tier model serve route agent tool step stream "
)
_WORDS = _WORDS_TEXT.split()


@functools.lru_cache(maxsize=1)
def _base() -> bytes:
    """1 MiB of word salad from a fixed seed, doubled so any window can be sliced without wrapping."""
    rng = random.Random(0x5EED)
    parts: list[str] = []
    size = 0
    while size < _BASE_BYTES:
        word = rng.choice(_WORDS)
        parts.append(word)
        size += len(word) + 1
    text = " ".join(parts).encode("ascii")[:_BASE_BYTES]
    return text + text


def _offset(key: str) -> int:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _BASE_BYTES


# The scenario's tokenizer, set once per load process (loadgen.engine.locustfile): with it every piece of
# text is cut to an exact token count; without it pieces are sized at BYTES_PER_TOKEN (an estimate).
_tokenizer: Tokenizer | None = None
_bytes_per_token = 0.0  # the most bytes per token of a piece cut so far (sizes the next candidate)


def use_tokenizer(tokenizer: Tokenizer | None) -> None:
    """Build every later piece of text to exact token counts with ``tokenizer`` (None: the byte estimate)."""
    global _tokenizer, _bytes_per_token
    _tokenizer = tokenizer
    _bytes_per_token = 0.0
    _exact_text.cache_clear()


def tokenizer() -> Tokenizer | None:
    return _tokenizer


def warm() -> None:
    """Build what the first prompt would otherwise build lazily: the 1 MiB base text (~150 ms) and, with a
    tokenizer, its compiled chat template. A load process calls this before the anchor, so the stall
    lands in start-up and not on the first requests (it was a 151 ms loop lag at t = 0.7 s)."""
    _base()
    if _tokenizer is not None and _tokenizer.chat_template is not None:
        _tokenizer.render_chat([{"role": "user", "content": "warm"}])


def text(key: str, tokens: int) -> str:
    """``max(tokens, 1)`` tokens of text starting with a tag unique to ``key`` (exact with a tokenizer)."""
    if _tokenizer is not None:
        return _exact_text(key, max(1, tokens))
    return _sized_text(key, max(1, tokens) * BYTES_PER_TOKEN)


@functools.lru_cache(maxsize=1024)
def _exact_text(key: str, tokens: int) -> str:
    """The longest start of the key's byte text that is exactly ``tokens`` tokens (a pure function of both)."""
    assert _tokenizer is not None
    global _bytes_per_token
    # a candidate a little longer than the densest text seen so far needs (2 × the estimate before any): one
    # encoding, not two; the cut is the same whatever the candidate's length (it is found near `tokens`, far from
    # the candidate's end, and checked exact)
    size = int(tokens * (_bytes_per_token * 1.1 if _bytes_per_token else 2 * BYTES_PER_TOKEN)) + 64
    while True:
        cut = _tokenizer.prefix_or_none(_sized_text(key, size), tokens)
        if cut is not None:
            if tokens >= 64:
                _bytes_per_token = max(_bytes_per_token, len(cut) / tokens)
            return cut
        size *= 2


def count(content: str) -> int:
    """Tokens of a given text: exact with the scenario's tokenizer, else ceil(bytes / 4), at least 1."""
    if _tokenizer is not None:
        return max(1, _tokenizer.count(content))
    return max(1, -(-len(content.encode()) // BYTES_PER_TOKEN))


def text_bytes(key: str, tokens: int) -> bytes:
    """``text(key, tokens).encode()``: without a tokenizer, the bytes without a str between (the simulator
    hashes every piece of a prompt's text once)."""
    if _tokenizer is not None:
        return _exact_text(key, max(1, tokens)).encode()
    return _sized_bytes(key, max(1, tokens) * BYTES_PER_TOKEN)


def _sized_text(key: str, size: int) -> str:
    """Exactly ``size`` ASCII bytes, starting with a tag unique to ``key``."""
    return _sized_bytes(key, size).decode("ascii")


def _sized_bytes(key: str, size: int) -> bytes:
    """``_sized_text`` as bytes."""
    layout = sized_layout(key, size)
    if layout is not None:
        tag, start, length = layout
        return tag + _base()[start : start + length]
    tag = _tag(key)
    reps = (size - len(tag)) // _BASE_BYTES + 1
    start = _offset(key)
    return tag + (_base()[start : start + _BASE_BYTES] * reps)[: size - len(tag)]


def _tag(key: str) -> bytes:
    return b"[" + hashlib.blake2b(key.encode(), digest_size=6).hexdigest().encode() + b"] "


def sized_layout(key: str, size: int) -> tuple[bytes, int, int] | None:
    """``_sized_bytes(key, size)`` as ``(tag, start, length)``: the tag (cut to ``size``), then ``length`` bytes of
    ``base()`` from ``start``; None for a text longer than the base, which repeats it (the simulator computes a
    piece's prefix hashes from these without making its bytes)."""
    tag = _tag(key)
    if size <= len(tag):
        return tag[:size], 0, 0
    need = size - len(tag)
    if need > _BASE_BYTES:
        return None
    return tag, _offset(key), need  # the base is doubled: a window this long never wraps


def base() -> bytes:
    """The base text every sized piece is a window of (2 MiB: 1 MiB twice)."""
    return _base()


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model made: its id, the tool's name and the arguments' JSON text exactly as streamed."""

    id: str
    name: str
    arguments: str
    cut: bool = False  # the answer ended at max_tokens while this call was still being written

    @property
    def text(self) -> str:
        """The call as prompt text (completions dialect, byte estimates)."""
        return f"{self.name}({self.arguments})"

    @property
    def complete(self) -> bool:
        """A call the model finished: the answer did not stop at max_tokens while writing it (a cut number
        still parses), and its arguments are whole JSON (a cut call is no call to replay: servers refuse
        it in a history). Any JSON value: real vLLM's grammar lets a random model call with ``2721000.0``,
        and takes it back in the next step."""
        if self.cut:
            return False
        try:
            json.loads(self.arguments or "{}")
        except ValueError:
            return False
        return True


ASSISTANT = "assistant"
TOOL = "tool"


@dataclass(slots=True)
class Conversation:
    """A growing prompt: a system text and alternating user/assistant messages, append-only.

    An assistant message may carry the tool call the model made, and a ``tool`` message answers one
    (``calls``: message index → that call); every dialect renders them in its own shape.
    """

    system: str = ""
    messages: list[tuple[str, str]] = field(default_factory=list)  # (role, content)
    calls: dict[int, ToolCall] = field(default_factory=dict)

    def with_user(self, content: str) -> Conversation:
        """A copy with one more user message (the copy shares the history's strings)."""
        return Conversation(self.system, [*self.messages, ("user", content)], self.calls)

    def append(self, role: str, content: str) -> None:
        self.messages.append((role, content))

    def append_call(self, call: ToolCall, content: str = "") -> None:
        """The assistant's turn that called ``call`` (``content``: any text it streamed before the call)."""
        self.calls = {**self.calls, len(self.messages): call}  # copies made by with_user keep their own
        self.messages.append((ASSISTANT, content))

    def append_result(self, call: ToolCall, content: str) -> None:
        """The tool's answer to ``call``."""
        self.calls = {**self.calls, len(self.messages): call}
        self.messages.append((TOOL, content))

    @property
    def bytes(self) -> int:
        return (len(self.system) + sum(len(c) for _, c in self.messages)
                + sum(len(call.text) for i, call in self.calls.items() if self.messages[i][0] == ASSISTANT))

    @property
    def tokens(self) -> int:
        return -(-self.bytes // BYTES_PER_TOKEN)

    def prompt_tokens(self, dialect: str, tools: list[dict[str, Any]] | None = None) -> tuple[int, bool]:
        """(tokens the server should count for this prompt in ``dialect``, whether the count is exact).

        With the scenario's tokenizer: counted (chat: through the model's chat template); without it,
        the byte estimate (not exact).
        """
        if _tokenizer is None:
            return self.tokens, False
        return _tokenizer.prompt_tokens(dialect, self.system, self.messages, self.flat(), tools, self.calls)

    def flat(self) -> str:
        """One prompt string (completions dialect): the pieces in order, newline-separated."""
        parts = [self.system] if self.system else []
        for i, (role, content) in enumerate(self.messages):
            call = self.calls.get(i)
            parts.append(content + call.text if call is not None and role == ASSISTANT else content)
        return "\n".join(parts)
