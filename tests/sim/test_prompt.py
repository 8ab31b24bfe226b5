"""Prompts by reference hash exactly as the testbed hashes the text a Locust persona would send."""

from __future__ import annotations

import pytest

from loadgen import prompts
from sim.prompt import Conversation, piece
from testbed.tokens import block_hashes


def _server_bytes(conv: prompts.Conversation, dialect: str) -> bytes:
    """What testbed/server.py reads from the body loadgen builds (chat: role lines; completions: flat)."""
    if dialect == "openai-completions":
        return conv.flat().encode()
    lines = [f"system: {conv.system}\n"] if conv.system else []
    return "".join(lines + [f"{role}: {c}\n" for role, c in conv.messages]).encode()


@pytest.mark.parametrize("dialect", ["openai-chat", "openai-completions"])
@pytest.mark.parametrize("system", [0, 100])
def test_incremental_hashes_equal_the_testbeds(dialect: str, system: int) -> None:
    sim = Conversation(piece("sys", system) if system else "")
    real = prompts.Conversation(prompts.text("sys", system) if system else "")
    for step in range(4):  # an agent's task: fan-out copies, then the history grows at the end
        for branch in range(3):
            a = sim.with_user(piece(f"n{step}{branch}", 16))
            b = real.with_user(prompts.text(f"n{step}{branch}", 16))
            assert a.server_size(dialect) == len(_server_bytes(b, dialect))  # before any hashing
            size, blocks = a.server_view(dialect, 16)
            raw = _server_bytes(b, dialect)
            assert size == len(raw) and blocks == block_hashes(raw, 16), (step, branch)
            assert a.tokens == b.tokens
        for role, key, n in (("user", f"u{step}", 16), ("assistant", f"a{step}", 37), ("user", f"t{step}", 301)):
            sim.append(role, piece(key, n))
            real.append(role, prompts.text(key, n))
            assert sim.server_size(dialect) == len(_server_bytes(real, dialect))
    assert sim.server_prompt(dialect) == _server_bytes(real, dialect)


def test_a_sent_prompt_keeps_its_blocks_when_the_conversation_grows() -> None:
    conv = Conversation(piece("s", 40))
    _, sent = conv.server_view("openai-chat", 16)
    before = list(sent)
    conv.append("user", piece("more", 300))
    _, grown = conv.server_view("openai-chat", 16)
    assert sent == before and len(grown) > len(before) and grown[: len(before)] == before
