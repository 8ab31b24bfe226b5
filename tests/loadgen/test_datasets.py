"""Conversation datasets: ShareGPT and OpenAI rows from JSONL or Parquet, one-line errors, exact token counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from rushhour.loadgen import prompts, tokens
from rushhour.loadgen.datasets import DatasetError, Dialog, Turn, read_dataset
from rushhour.loadgen.engine.wire.dialects import build_body
from rushhour.loadgen.engine.wire.stream import OPENAI_CHAT
from rushhour.loadgen.traces import TraceRef, check_trace_file, locate_trace
from rushhour.scenarios.distributions import BUNDLED_DATASETS

SHIPPED = BUNDLED_DATASETS / "chat-mini.jsonl"
TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' }}{{ message['content'] }}"
            "{% for call in message.get('tool_calls', []) %}{{ call.function.name }}"
            "{{ call.function.arguments | tojson }}{% endfor %}{{ eos_token }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


@pytest.fixture
def tokenizer(tmp_path: Path) -> Iterator[tokens.Tokenizer]:
    """A small byte-level BPE trained here (no download) with a chat template that renders tool calls."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|bos|>", "<|eos|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([SHIPPED.read_text()], trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "chat_template": TEMPLATE}))
    loaded = tokens.load(tmp_path)
    prompts.use_tokenizer(loaded)
    yield loaded
    prompts.use_tokenizer(None)


def _write(tmp: Path, rows: list[object], name: str = "d.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_shipped_dataset_reads_with_its_multi_turn_rows() -> None:
    dialogs = read_dataset(SHIPPED)
    assert len(dialogs) == 24 and sum(len(d.turns) for d in dialogs) == 37
    assert sum(1 for d in dialogs if len(d.turns) > 1) >= 10 and any(d.system for d in dialogs)
    assert all(t.user and t.reply for d in dialogs for t in d.turns)
    assert (BUNDLED_DATASETS / "README.md").read_text().count("CC0") >= 1
    assert locate_trace("chat-mini.jsonl", None) == SHIPPED.resolve()  # found by bare name


def test_openai_messages_and_merging_rules(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        {"messages": [{"role": "developer", "content": "be brief"},
                      {"role": "assistant", "content": "hello!"},  # before any user: left out
                      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                      {"role": "user", "content": "c"},
                      {"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"},
                      {"role": "user", "content": "last"}]},
    ])
    (d,) = read_dataset(path)
    assert d == Dialog(1, "be brief", (Turn("ab\nc", "x\ny"), Turn("last", None)))


def test_parquet_in_both_shapes_and_limit(tmp_path: Path) -> None:
    rows = [json.loads(x) for x in SHIPPED.read_text().splitlines()]
    table = pa.Table.from_pylist([{"conversations": r["conversations"]} for r in rows])
    pq.write_table(table, tmp_path / "sg.parquet")
    assert read_dataset(tmp_path / "sg.parquet") == read_dataset(SHIPPED)
    pair = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    msgs = pa.Table.from_pylist([{"messages": pair}])
    pq.write_table(msgs, tmp_path / "oa.parquet")
    assert read_dataset(tmp_path / "oa.parquet") == [Dialog(1, "", (Turn("hi", "yo"),))]
    assert len(read_dataset(SHIPPED, limit=5)) == 5


@pytest.mark.parametrize(("content", "fmt", "message"), [
    (b"", "auto", "no conversations"),
    (b'{"conversations": [{"from": "human", "value": "hi"}]}\nnot json\n', "auto", ":2: not JSON"),
    (b'{"prompt": "hi"}\n', "auto", ":1: no 'conversations' (ShareGPT) or 'messages' (OpenAI) list"),
    (b'{"messages": [{"role": "user", "content": "hi"}]}\n', "sharegpt", ":1: no 'conversations' list"),
    (b'{"conversations": [{"from": "robot", "value": "hi"}]}\n', "auto", "unknown speaker 'robot'"),
    (b'{"conversations": [{"from": "gpt", "value": "hi"}]}\n', "auto", ":1: no user message"),
    (b'{"messages": [{"role": "tool", "content": "x"}]}\n', "auto", "role 'tool' is not sent"),
    (b'{"messages": [{"role": "user", "content": 5}]}\n', "auto", "content must be text"),
    (b'[1, 2]\n', "auto", "a row must be a JSON object"),
    (b"\xff\xfe{}", "auto", "not UTF-8"),
    (b"PAR1\x00\x00", "auto", "binary data"),
    (b'{"conversations": [{"from": "human", "value": "hi"}]}\n', "yaml", "unknown dataset format"),
])
def test_bad_input_is_one_line_naming_file_and_row(tmp_path: Path, content: bytes, fmt: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(DatasetError) as err:
        read_dataset(path, fmt)
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


def test_not_parquet_and_wrong_columns(tmp_path: Path) -> None:
    (tmp_path / "x.parquet").write_text("hello")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        read_dataset(tmp_path / "x.parquet")
    pq.write_table(pa.Table.from_pylist([{"text": "hi"}]), tmp_path / "y.parquet")
    with pytest.raises(DatasetError, match=r"no 'conversations' or 'messages' column \(columns: text\)"):
        read_dataset(tmp_path / "y.parquet")


def test_scenario_check_reads_the_dataset_and_keeps_the_folder_rule(tmp_path: Path) -> None:
    bad = _write(tmp_path, [{"conversations": [{"from": "gpt", "value": "x"}]}])
    with pytest.raises(DatasetError, match="no user message"):
        check_trace_file(bad, TraceRef("personas.0.dataset.path", str(bad), "dataset:auto"))
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    with pytest.raises(ValueError, match="--allow-path"):
        locate_trace(str(bad), elsewhere)


def test_token_counts_stay_exact_with_dataset_text_and_tool_calls(tokenizer: tokens.Tokenizer) -> None:
    dialog = read_dataset(SHIPPED)[3]
    conv = prompts.Conversation(dialog.system)
    conv.append("user", dialog.turns[0].user)
    call = prompts.ToolCall("call_1", "run_command", '{"command": "uptime"}')
    conv.append_call(call)
    conv.append_result(call, dialog.turns[0].reply or "")
    nxt = conv.with_user(dialog.turns[1].user)
    counted, exact = nxt.prompt_tokens(OPENAI_CHAT)
    assert exact
    # what the server renders from the body we send: vLLM hands the template "" for a null content
    # (renderers/chat_utils.py _parse_chat_message_content) and parses tool-call arguments into objects
    _, body = build_body(OPENAI_CHAT, "m", nxt, 8, True)
    messages = orjson.loads(body)["messages"]
    for m in messages:
        m["content"] = "" if m["content"] is None else m["content"]
        for tc in m.get("tool_calls") or []:
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
    rendered = tokenizer.render_chat(messages)
    assert rendered is not None and "run_command" in rendered and "uptime" in rendered  # the call is counted
    assert counted == tokenizer.count(rendered)
    assert prompts.count(dialog.turns[0].reply or "") == tokenizer.count(dialog.turns[0].reply or "")
