"""A conversation's sizes, counted as messages are appended, are the sums over all its messages."""

from __future__ import annotations

import random

from rushhour.sim.prompt import Content, Conversation, _nbytes, piece


def _sizes(conv: Conversation) -> tuple[int, int, int]:
    """(nbytes, openai-chat server size, openai-completions server size), summed from scratch."""
    msgs, system = conv.messages, conv.system
    nbytes = len(system) + sum(len(c) for _, c in msgs)
    chat = (_nbytes(system) + 9 if system else 0) + sum(len(role) + 3 + _nbytes(c) for role, c in msgs)
    seps = len(msgs) - (0 if system else 1)
    flat = (_nbytes(system) if system else 0) + sum(_nbytes(c) for _, c in msgs) + max(0, seps)
    return nbytes, chat, flat


def test_kept_sizes_are_the_sums() -> None:
    rng = random.Random(2)

    def content() -> Content:
        return piece(f"k{rng.randrange(1000)}", rng.randrange(0, 50)) if rng.random() < 0.5 else rng.choice(
            ["", "plain", "naïve café ✓", "日本語のテキスト", "x" * rng.randrange(200)])

    for system in ("", "sys ✓", piece("s", 30)):
        convs = [Conversation(system)]
        for _ in range(300):
            conv = rng.choice(convs)
            if rng.random() < 0.4:
                conv = conv.with_user(content())
                convs.append(conv)
            else:
                conv.append(rng.choice(["user", "assistant", "tool"]), content())
            if rng.random() < 0.5:  # asked at times, as attempts and steps do
                want = _sizes(conv)
                got = (conv.nbytes, conv.server_size("openai-chat"), conv.server_size("openai-completions"))
                assert got == want
                assert conv.tokens == -(-want[0] // 4)
        for conv in convs:
            assert (conv.nbytes, conv.server_size("openai-chat"), conv.server_size("openai-completions")) == \
                _sizes(conv)
