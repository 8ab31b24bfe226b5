"""Prompts by reference hash exactly as the testbed hashes the text a Locust persona would send."""

from __future__ import annotations

import pytest

from rushhour.loadgen import prompts
from rushhour.sim.prompt import Conversation, piece
from rushhour.testbed.tokens import block_hashes


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
    before = sent[:]  # a copy (the ids are an array)
    conv.append("user", piece("more", 300))
    _, grown = conv.server_view("openai-chat", 16)
    assert sent == before and len(grown) > len(before) and grown[: len(before)] == before


@pytest.mark.parametrize("dialect", ["openai-chat", "openai-completions"])
@pytest.mark.parametrize("block_tokens", [1, 4, 16])
def test_parts_of_every_kind_give_the_ids_of_the_bytes(dialect: str, block_tokens: int) -> None:
    """Pieces cut inside their tag, short and long ones (their ids one by one and in array passes), text given as
    str (short and long), a str or piece system part: block for block the ids of the bytes the server reads."""
    import random

    rng = random.Random(block_tokens)
    for trial in range(12):
        system: str | object = rng.choice(["", "be brief", "x" * 300, piece(f"sys{trial}", rng.randrange(1, 900))])
        sim = Conversation(system)  # type: ignore[arg-type]
        real = prompts.Conversation(system if isinstance(system, str) else system.text())  # type: ignore[attr-defined]
        for step in range(6):
            role = rng.choice(["user", "assistant", "tool"])
            if rng.random() < 0.3:
                text = "é" * rng.choice([1, 10, 40, 200])  # UTF-8: two bytes a character
                sim.append(role, text)
                real.append(role, text)
            else:
                key, n = f"p{trial}-{step}", rng.choice([1, 2, 3, 4, 5, 16, 37, 301, 2000])
                sim.append(role, piece(key, n))
                real.append(role, prompts.text(key, n))
            size, blocks = sim.server_view(dialect, block_tokens)
            raw = _server_bytes(real, dialect)
            assert size == len(raw) and blocks == block_hashes(raw, block_tokens), (trial, step)


def test_block_ids_tell_prefixes_apart() -> None:
    """Two prompts share a block id exactly where they share every byte up to that block's end."""
    a = block_hashes(b"x" * 200 + b"tail" * 30, 4)
    b = block_hashes(b"x" * 200 + b"TAIL" * 30, 4)
    c = block_hashes(b"y" + b"x" * 199 + b"tail" * 30, 4)
    assert a[:12] == b[:12] and a[12] != b[12]  # bytes 0..191 agree, 192..207 hold the first difference
    assert all(x != y for x, y in zip(a, c, strict=True))  # the first byte differs: no block is the same
    assert len(set(a)) == len(a)
