"""Tokenizer-exact prompt pieces, whole-prompt counts through a chat template, pinned output on the wire."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from rushhour.loadgen import prompts, tokens
from rushhour.loadgen.engine.wire.dialects import build_body
from rushhour.scenarios.tools import BUILTIN_TOOLS

TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' }}{{ message['content'] }}"
            "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")
SPECIAL = ["<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small byte-level BPE trained here on the prompt text itself (no download), with a chat template."""
    folder = tmp_path_factory.mktemp("tok")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([prompts._base()[:200_000].decode()], trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|bos|>", "eos_token": {"content": "<|eos|>"}, "chat_template": TEMPLATE}))
    return folder


@pytest.fixture
def tokenizer(model_dir: Path) -> Iterator[tokens.Tokenizer]:
    tok = tokens.load(model_dir)
    prompts.use_tokenizer(tok)
    yield tok
    prompts.use_tokenizer(None)


def test_pieces_are_exact_and_deterministic(tokenizer: tokens.Tokenizer) -> None:
    for n in (*range(1, 40), 97, 500, 3000):
        piece = prompts.text(f"key:{n}", n)
        assert tokenizer.count(piece) == n, n
        assert prompts.text(f"key:{n}", n) == piece  # a pure function of (key, n): prefix caches see the same bytes
    assert prompts.text("a", 50) != prompts.text("b", 50)


def test_chat_prompt_counted_through_the_template(tokenizer: tokens.Tokenizer) -> None:
    conv = prompts.Conversation(prompts.text("sys", 30)).with_user(prompts.text("u0", 40))
    conv.append("assistant", prompts.text("a0", 7))
    conv = conv.with_user(prompts.text("u1", 12))
    count, exact = conv.prompt_tokens("openai-chat")
    # bos + (role + content + eos) per message + the generation prompt: the template's own tokens
    assert (count, exact) == (30 + 40 + 7 + 12 + 1 + 4 * 2 + 1, True)
    flat, exact_flat = conv.prompt_tokens("openai-completions")
    assert exact_flat and flat == tokenizer.count(conv.flat(), special=True)
    assert conv.prompt_tokens("anthropic-messages") == (30 + 40 + 7 + 12, False)


def test_without_a_tokenizer_the_count_is_an_estimate() -> None:
    prompts.use_tokenizer(None)
    conv = prompts.Conversation().with_user(prompts.text("x", 25))
    assert conv.prompt_tokens("openai-chat") == (25, False)
    assert len(prompts.text("x", 25)) == 100


def test_tokenizer_file_or_folder_and_one_line_errors(model_dir: Path, tmp_path: Path) -> None:
    assert tokens.load(model_dir / "tokenizer.json").chat_template == TEMPLATE
    with pytest.raises(tokens.TokenizerError, match=r"no tokenizer\.json"):
        tokens.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(tokens.TokenizerError, match="cannot be read"):
        tokens.load(tmp_path)


def test_pinned_output_on_the_wire() -> None:
    conv = prompts.Conversation().with_user("hi")
    _, body = build_body("openai-chat", "m", conv, 64, True, pin_output=True)
    sent = orjson.loads(body)
    assert (sent["max_tokens"], sent["min_tokens"], sent["ignore_eos"]) == (64, 64, True)
    _, plain = build_body("openai-chat", "m", conv, 64, True)
    assert "min_tokens" not in orjson.loads(plain) and "ignore_eos" not in orjson.loads(plain)
    _, anthropic = build_body("anthropic-messages", "m", conv, 64, True, pin_output=True)
    assert "ignore_eos" not in orjson.loads(anthropic)  # Anthropic's API has no such field


def test_agent_tools_on_the_wire_and_in_the_count(model_dir: Path) -> None:
    conv = prompts.Conversation().with_user("fix the bug")
    _, chat = build_body("openai-chat", "m", conv, 8, True, tools=BUILTIN_TOOLS)
    assert orjson.loads(chat)["tools"] == BUILTIN_TOOLS
    _, anthropic = build_body("anthropic-messages", "m", conv, 8, True, tools=BUILTIN_TOOLS)
    first = orjson.loads(anthropic)["tools"][0]
    assert set(first) == {"name", "description", "input_schema"} and first["name"] == "read_file"
    # a template that renders the tools: the intended count includes them, as the server's does
    tok = tokens.load(model_dir)
    tok.chat_template = "{% if tools %}{{ tools | tojson }}{% endif %}" + TEMPLATE
    without, _ = tok.prompt_tokens("openai-chat", "", conv.messages, conv.flat())
    with_tools, exact = tok.prompt_tokens("openai-chat", "", conv.messages, conv.flat(), BUILTIN_TOOLS)
    assert exact and with_tools > without + 50


class _Recording:
    """The tokenizer's backend, noting the length of every text it encodes."""

    def __init__(self, backend: Tokenizer) -> None:
        self.backend = backend
        self.lengths: list[int] = []

    def encode_batch(self, texts: list[str], add_special_tokens: bool) -> Any:
        self.lengths += [len(t) for t in texts]
        return self.backend.encode_batch(texts, add_special_tokens=add_special_tokens)

    def get_added_tokens_decoder(self) -> Any:
        return self.backend.get_added_tokens_decoder()


def test_a_growing_prompt_is_counted_from_its_counted_start(tokenizer: tokens.Tokenizer) -> None:
    # an agent's next request re-sends its history: only the new end is encoded, and the count stays exact
    real = tokenizer.backend
    recording = _Recording(real)
    tokenizer.backend = recording
    try:
        conv = prompts.Conversation(prompts.text("sys", 300)).with_user(prompts.text("ctx", 3000))
        for step in range(4):
            count, exact = conv.prompt_tokens("openai-chat")
            rendered = tokenizer.render_chat([{"role": "system", "content": conv.system},
                                              *({"role": r, "content": c} for r, c in conv.messages)])
            assert rendered is not None and exact
            assert count == len(real.encode(rendered, add_special_tokens=False).ids), step
            if step:
                assert recording.lengths[-1] < 1000 < len(rendered)  # the new messages, not the history
            conv.append("assistant", prompts.text(f"out{step}", 20))
            conv = conv.with_user(prompts.text(f"tool{step}", 50))
        other = prompts.Conversation(prompts.text("sys", 300)).with_user(prompts.text("ctx2", 40))
        assert other.prompt_tokens("openai-chat")[0] == tokenizer.count(tokenizer.render_chat(
            [{"role": "system", "content": other.system}, {"role": "user", "content": other.messages[0][1]}]) or "")
    finally:
        tokenizer.backend = real


def test_a_load_process_encodes_in_its_tokenizer_thread_at_the_process_priority(tokenizer: tokens.Tokenizer) -> None:
    import os
    import threading

    from rushhour.loadgen.engine.tokenize import off_loop

    seen: list[tuple[int, int]] = []  # (thread, its nice value) of every encoding
    real = tokenizer.backend

    class Where(_Recording):
        def encode_batch(self, texts: list[str], add_special_tokens: bool) -> Any:
            seen.append((threading.get_ident(), os.getpriority(os.PRIO_PROCESS, 0)))
            return super().encode_batch(texts, add_special_tokens)

    tokenizer.backend = Where(real)
    try:
        assert off_loop(tokenizer) is tokenizer
        conv = prompts.Conversation(prompts.text("sys:t", 30)).with_user(prompts.text("u:t", 700))
        assert conv.prompt_tokens("openai-chat") == (30 + 700 + 2 * 2 + 1 + 1, True)
    finally:
        tokenizer.backend = real
        tokenizer.offload = None
    assert seen and all(ident != threading.get_ident() for ident, _ in seen)  # never on the loop's thread
    # not nicer than the process: a nicer thread starved as soon as another process wanted the core (tokenize.py)
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert all(nice == mine for _, nice in seen)
