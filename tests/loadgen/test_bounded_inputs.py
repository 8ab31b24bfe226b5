"""Hostile datasets and chat templates, made here: each is refused in one line naming the file (and the row or row
group), fast and without the memory it asks for. Before the bounds: a 100 MB row became a 105 MB request, a 615-byte
Parquet file took 23 s and 5.5 GB to decode, a 100,000-deep row and bytes in a Parquet row ended as exit 3, and a
few-byte template drove a load process to 14 GiB."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rushhour.loadgen import datasets, tokens
from rushhour.loadgen.bounded_json import MAX_JSON_DEPTH, depth
from rushhour.loadgen.chat_template import MAX_RENDER_BYTES, TemplateError, compile_template, render
from rushhour.loadgen.datasets import MAX_ROW_TEXT_BYTES, DatasetError, read_dataset
from rushhour.loadgen.template_trial import TRIAL_MEMORY_BYTES, trial_render
from tests.loadgen.hostile_models import model_with_template as _model
from tests.loadgen.hostile_models import run_measured

GOOD_TEMPLATE = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")
LOOP = "{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}"
# a string doubled 64 times: 2**64 characters (the kind of 71-byte template that drove a load process to 14.3 GiB)
DOUBLING = "{% set n = namespace(s='x') %}{% for i in range(64) %}{% set n.s = n.s ~ n.s %}{% endfor %}"
# one that no operator check sees (a list of one 30 MB string, 1,000 times, as text): only the trial's memory cap
AROUND_THE_CHECKS = "{% set a = 'x' * 30000000 %}{{ ([a] * 1000)|string }}"


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _sharegpt(text: str) -> dict[str, object]:
    return {"conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "ok"}]}


def test_a_100_mb_row_is_refused_after_reading_a_bounded_part_of_it(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("w") as handle:
        handle.write(json.dumps(_sharegpt("fine")) + "\n")
        handle.write(json.dumps(_sharegpt("x" * (100 << 20))) + "\n")
    before, started = _peak_mb(), time.monotonic()
    with pytest.raises(DatasetError, match=rf"^{path}:2: the row is longer than [\d,]+ bytes") as err:
        read_dataset(path)
    assert "2,000,000 tokens" in str(err.value) and "\n" not in str(err.value)
    assert time.monotonic() - started < 2.0
    assert _peak_mb() - before < 60  # the line is read up to its cap (17 MB), never whole (100 MB)


def test_a_row_over_one_prompt_of_text_is_refused_with_its_size(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(_sharegpt("y" * (MAX_ROW_TEXT_BYTES + 1))) + "\n")
    with pytest.raises(DatasetError, match=rf"^{path}:1: 8,000,003 bytes of text \(≈ 2,000,001 tokens\)"):
        read_dataset(path)
    path.write_text(json.dumps(_sharegpt("y" * (MAX_ROW_TEXT_BYTES - 10))) + "\n")
    assert read_dataset(path)[0].turns[0].user == "y" * (MAX_ROW_TEXT_BYTES - 10)  # just under: read


def _dictionary_bomb(path: Path, rows: int, value_bytes: int) -> None:
    """``rows`` rows all pointing at one dictionary entry of ``value_bytes``: a few hundred bytes on disk."""
    value = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["a" * value_bytes]))
    speaker = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["human"]))
    messages = pa.StructArray.from_arrays([speaker, value], names=["from", "value"])
    column = pa.ListArray.from_arrays(pa.array(range(rows + 1), pa.int32()), messages)
    pq.write_table(pa.table({"conversations": column}), path, compression="zstd", compression_level=22,
                   dictionary_pagesize_limit=1 << 22)


def test_a_parquet_dictionary_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    path = tmp_path / "bomb.parquet"
    _dictionary_bomb(path, rows=4000, value_bytes=1_000_000)  # 4 GB of text once decoded
    assert path.stat().st_size < 2000
    before, started = _peak_mb(), time.monotonic()
    with pytest.raises(DatasetError, match=rf"^{path}: row group 0 \(rows 1–4000\): the text decodes to more than"):
        read_dataset(path)
    assert time.monotonic() - started < 5.0 and _peak_mb() - before < 200


def test_a_parquet_compression_bomb_is_refused_from_the_footer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.setattr(datasets, "MAX_DATASET_BYTES", 50 << 20)  # the same check at a size a test can write
    path = tmp_path / "plain.parquet"
    rows = 60  # one 1 MB value per row, stored plain (no dictionary) and compressed: 60 MB uncompressed
    value = pa.array(["b" * 1_000_000]).take(pa.array([0] * rows))
    column = pa.ListArray.from_arrays(pa.array(range(rows + 1), pa.int32()), pa.StructArray.from_arrays(
        [pa.array(["human"] * rows), value], names=["from", "value"]))
    pq.write_table(pa.table({"conversations": column}), path, compression="zstd", use_dictionary=False,
                   row_group_size=20)
    assert path.stat().st_size < 200_000
    with pytest.raises(DatasetError, match=rf"^{path}: row group 2: the columns read decompress to more than "
                                           f"the {50 << 20:,} bytes"):
        read_dataset(path)


def test_a_small_repeated_parquet_reads_as_before(tmp_path: Path) -> None:
    path = tmp_path / "fine.parquet"
    _dictionary_bomb(path, rows=50, value_bytes=1000)  # the same entry 50 times: 50 kB decoded, well within
    dialogs = read_dataset(path)
    assert len(dialogs) == 50 and dialogs[49].turns[0].user == "a" * 1000


def test_bytes_and_other_types_in_a_parquet_row_are_one_line_naming_the_row(tmp_path: Path) -> None:
    path = tmp_path / "bytes.parquet"
    pq.write_table(pa.table({"conversations": [[{"from": "human", "value": "fine"}],
                                               [{"from": "human", "value": None}]]}), path)
    raw = tmp_path / "raw.parquet"
    pq.write_table(pa.table({"conversations": [[{"from": "human", "value": b"\x00\xffhi"}]]}), raw)
    with pytest.raises(DatasetError, match=rf"^{raw}:1: conversations\[0\] must be {{from: <speaker>, value: <text>}}"
                                           r".*<bytes>"):
        read_dataset(raw)
    with pytest.raises(DatasetError, match=rf"^{path}:2: conversations\[0\]"):
        read_dataset(path)


def test_a_100000_deep_json_row_is_one_line_and_no_recursion(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(_sharegpt("fine")) + "\n" + '{"conversations": ' + "[" * 100_000 + "]" * 100_000
                    + "}\n")
    started = time.monotonic()
    with pytest.raises(DatasetError, match=rf"^{path}:2: JSON nested 100,001 deep, more than the {MAX_JSON_DEPTH}"):
        read_dataset(path)
    assert time.monotonic() - started < 1.0
    assert depth('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "b": [1, {"c": "\\"]]]"}]}') == 3  # text is not nesting


@pytest.mark.parametrize("source, message", [
    (DOUBLING, "'~' would build 33,554,432 characters, over the cap"),
    ("{% set n = namespace(s='x') %}{% for i in range(64) %}{% set n.s = n.s + n.s %}{% endfor %}", "'\\+' would"),
    ("{{ 'x' * 99999 * 99999 }}", "'\\*' would build 9,999,800,001 items"),
    ("{{ 'x'|center(9999999999) }}", "center\\(9,999,999,999\\) is over the cap"),
    ("{{ 'x'.ljust(9999999999) }}", "ljust\\(9,999,999,999\\) is over the cap"),
    ("{{ 9 ** 9999999 }}", "'\\*\\*' would build a number"),
    ("{% for a in range(99999) %}{{ range(99999)|join }}{% endfor %}", f"renders more than {MAX_RENDER_BYTES:,}"),
])
def test_the_bounded_sandbox_refuses_each_bomb_before_building_it(source: str, message: str) -> None:
    before = _peak_mb()
    with pytest.raises(TemplateError, match=message):
        # a wall cap far above the default: the size cap under test must refuse first even on a loaded host
        # (there the last bomb's 32 M characters took over the default 5 s, and the clock refused it instead)
        render(compile_template(source, lambda m: None), {"messages": []}, seconds=120)
    assert _peak_mb() - before < 300


def test_a_looping_template_is_stopped_at_the_wall_time_cap() -> None:
    started = time.monotonic()
    with pytest.raises(TemplateError, match=r"still rendering after 0\.5 s"):
        render(compile_template(LOOP, lambda m: None), {"messages": []}, seconds=0.5)
    assert time.monotonic() - started < 2.0


LLAMA_LIKE = (  # the constructs of real templates: namespace, slicing, tojson, trim, format, is defined, loop.last
    "{{- bos_token }}{%- set ns = namespace(sys='') %}{%- if messages[0]['role'] == 'system' %}"
    "{%- set ns.sys = messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- endif %}"
    "{{- '<|system|>' ~ ns.sys ~ '<|eot|>' }}{%- for message in messages %}"
    "{%- if message.tool_calls is defined and message.tool_calls|length > 0 %}"
    "{%- set call = message.tool_calls[0].function %}"
    "{{- '{\"name\": \"' + call.name + '\", \"parameters\": ' + call.arguments|tojson + '}' }}"
    "{%- else %}{{- '<|' + message['role'] + '|>' + message['content'] | trim + '<|eot|>' }}{%- endif %}"
    "{%- if loop.last and add_generation_prompt %}{{- '<|assistant|>' }}{%- endif %}{%- endfor %}"
    "{%- for t in tools or [] %}{{ t.function.name | upper }}{{ t | tojson(indent=2) }}{{ '%s-%d' | format('x', 1) }}"
    "{% endfor %}")


def test_real_templates_render_exactly_as_in_the_plain_sandbox() -> None:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from rushhour.loadgen.template_trial import TRIALS

    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    for source in (GOOD_TEMPLATE, LLAMA_LIKE):
        for messages, tools in TRIALS:
            values = {"messages": messages, "tools": tools, "add_generation_prompt": True, "bos_token": "<s>"}
            assert render(compile_template(source, lambda m: None), values) == plain.from_string(source).render(
                **values)


@pytest.mark.parametrize("template, message", [
    (DOUBLING, "'~' would build"),
    (AROUND_THE_CHECKS, "ran out of memory while rendering"),
    ("{% for x in %}", "does not compile"),
])
def test_the_trial_render_refuses_in_a_capped_child_naming_the_file(tmp_path: Path, template: str,
                                                                     message: str) -> None:
    folder = _model(tmp_path / "m", template)
    started = time.monotonic()
    problem = trial_render(folder, str(folder / "chat_template.jinja"))
    assert problem is not None and problem.startswith(f"chat template {folder / 'chat_template.jinja'}: ")
    assert message in problem and time.monotonic() - started < 15.0


def test_the_trial_child_stays_under_its_memory_cap(tmp_path: Path) -> None:
    """The render that no operator check sees, measured: the child and its own child, through wait4."""
    folder = _model(tmp_path / "m", AROUND_THE_CHECKS)
    code = (f"from pathlib import Path; from rushhour.loadgen.template_trial import trial_render; "
            f"print(trial_render(Path({str(folder)!r}), 't'))")
    exit_code, said, _, peak_mb = run_measured([sys.executable, "-c", code], tmp_path)
    assert "ran out of memory" in said and exit_code == 0
    assert peak_mb < (TRIAL_MEMORY_BYTES >> 20) * 1.05  # the 1 GiB cap, not the 30 GB asked for


def test_a_template_that_refuses_a_conversation_shape_is_not_refused(tmp_path: Path) -> None:
    folder = _model(tmp_path / "m", "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}"
                                    "{% endif %}" + GOOD_TEMPLATE)
    assert trial_render(folder, "t") is None


def test_at_run_time_a_template_over_a_cap_is_a_tokenizer_error_naming_the_file(tmp_path: Path) -> None:
    folder = _model(tmp_path / "m", DOUBLING)
    tok = tokens.load(folder)
    with pytest.raises(tokens.TokenizerError, match=rf"^chat template {folder / 'chat_template.jinja'}: '~' would"):
        tok.render_chat([{"role": "user", "content": "hi"}])


def test_with_a_tokenizer_a_row_is_held_to_the_prompt_limit_in_tokens(tmp_path: Path) -> None:
    """3 MB of text is within the byte bound (8 MB) but 3,000,000 tokens for a tokenizer of one byte a token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from rushhour.loadgen.datasets import check_tokens, load_dataset
    from rushhour.loadgen.prepare import check_tokenizer
    from rushhour.scenarios import ScenarioError, load_scenario

    model = tmp_path / "bytes-model"
    model.mkdir()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.save(str(model / "tokenizer.json"))
    (tmp_path / "long.jsonl").write_text(json.dumps(_sharegpt("short")) + "\n"
                                         + json.dumps(_sharegpt("z" * 3_000_000)) + "\n")
    (tmp_path / "s.yaml").write_text(
        "name: t\ntarget: {url: testbed, profile: vllm, metrics: null, tokenizer: bytes-model}\n"
        "tiers: [{name: i, priority: 0}]\npersonas:\n  - {kind: chat, name: u, tier: i, arrival: {process: poisson, "
        "rate: 1}, dataset: {path: " + str(tmp_path / "long.jsonl") + "}}\nphases: [{name: m, duration: 3s}]\n")
    assert len(read_dataset(tmp_path / "long.jsonl")) == 2  # within the byte bound
    started = time.monotonic()
    with pytest.raises(ScenarioError, match=rf"personas\.0\.dataset\.path: {tmp_path / 'long.jsonl'}:2: "
                                            r"3,000,0\d\d tokens of text \(the scenario's tokenizer\)"):
        check_tokenizer(load_scenario(tmp_path / "s.yaml"), tmp_path, "s.yaml")
    assert time.monotonic() - started < 20
    load_dataset.cache_clear()
    check_tokens(str(tmp_path / "long.jsonl"), "auto", 1, lambda text: len(text))  # the first row only: fine


@pytest.mark.parametrize("line, message", [
    ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "JSON nested 100,001 deep"),
    (json.dumps({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": list(range(5000))}),
     "5,000 hash_ids, more than the 3,907 blocks"),
    (json.dumps({"timestamp": 1, "input_length": 5, "output_length": 1, "pad": "x" * (2 << 20)}),
     "a line of 2,097,2"),
])
def test_a_hostile_mooncake_line_is_one_line_naming_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    from rushhour.loadgen.traces import TraceError, read_trace

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1}) + "\n" + line + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:2: {message}"):
        read_trace(path)
