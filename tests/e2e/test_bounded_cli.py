"""Hostile inputs through the real command line: `scenario check` and `run --dry-run` refuse each in one line naming
the file (and row), exit 2, in bounded time and memory (the CLI's peak RSS, its children included, from wait4);
numeric flags that are inf, NaN or absurd are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import cli_command

from tests.loadgen.hostile_models import model_with_template as _model
from tests.loadgen.hostile_models import run_measured

pytestmark = pytest.mark.e2e
CLI = cli_command()
SCENARIO = """name: hostile
target: {{url: testbed, profile: vllm, testbed: {{preset: tiny, replicas: 1}}, metrics: null{tokenizer}}}
tiers: [{{name: interactive, priority: 0}}]
personas:
  - {{kind: chat, name: users, tier: interactive, arrival: {{process: poisson, rate: 1}}{dataset}}}
phases: [{{name: main, duration: 3s}}]
"""


def _cli(*args: str | Path, cwd: Path) -> tuple[int, str, float, float]:
    """(exit code, stdout + stderr, seconds, peak RSS in MB of the CLI and its children)."""
    return run_measured([*CLI, *map(str, args)], cwd)


def _scenario(folder: Path, dataset: str | None = None, tokenizer: str | None = None) -> Path:
    path = folder / "s.yaml"
    path.write_text(SCENARIO.format(dataset=f", dataset: {{path: {dataset}}}" if dataset else "",
                                    tokenizer=f", tokenizer: {tokenizer}" if tokenizer else ""))
    return path


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_100_mb_row_is_refused_at_check_and_dry_run(tmp_path: Path) -> None:
    with (tmp_path / "big.jsonl").open("w") as handle:
        handle.write(json.dumps({"conversations": [{"from": "human", "value": "x" * (100 << 20)}]}) + "\n")
    scenario = _scenario(tmp_path, "big.jsonl")
    verbs: list[list[str | Path]] = [["scenario", "check", scenario],
                                     ["run", scenario, "--dry-run", "--out", tmp_path / "runs"]]
    for verb in verbs:
        code, text, seconds, peak = _cli(*verb, cwd=tmp_path)
        assert code == 2, text
        assert f"{tmp_path / 'big.jsonl'}:1: the row is longer than" in text
        assert seconds < 15 and peak < 400, (seconds, peak)  # was 3.5 s, 544 MB and a 105 MB request per session
    assert not (tmp_path / "runs").exists()


def test_a_parquet_bomb_is_refused_at_dry_run_without_the_memory(tmp_path: Path) -> None:
    rows = 4000
    value = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["a" * 1_000_000]))
    speaker = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["human"]))
    column = pa.ListArray.from_arrays(pa.array(range(rows + 1), pa.int32()),
                                      pa.StructArray.from_arrays([speaker, value], names=["from", "value"]))
    pq.write_table(pa.table({"conversations": column}), tmp_path / "bomb.parquet", compression="zstd",
                   compression_level=22, dictionary_pagesize_limit=1 << 22)
    assert (tmp_path / "bomb.parquet").stat().st_size < 2000  # 4 GB of text once decoded
    code, text, seconds, peak = _cli("run", _scenario(tmp_path, "bomb.parquet"), "--dry-run", cwd=tmp_path)
    assert code == 2 and "bomb.parquet: row group 0 (rows 1–4000): the text decodes to more than" in text, text
    assert seconds < 15 and peak < 500, (seconds, peak)  # was 6–23 s and 5.5 GB


@pytest.mark.parametrize("name, write, where", [
    ("deep.jsonl", lambda p: p.write_text('{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}\n"),
     ":1: JSON nested 100,001 deep"),
    ("bytes.parquet", lambda p: pq.write_table(pa.table({"conversations": [[{"from": "human", "value": b"\xff"}]]}),
                                               p), ":1: conversations[0] must be {from: <speaker>, value: <text>}"),
])
def test_deep_json_and_bytes_in_parquet_are_one_line_naming_file_and_row(tmp_path: Path, name: str, write: object,
                                                                         where: str) -> None:
    write(tmp_path / name)  # type: ignore[operator]
    code, text, _, _ = _cli("scenario", "check", _scenario(tmp_path, name), cwd=tmp_path)
    assert code == 2 and f"{tmp_path / name}{where}" in text, text  # was exit 3, RecursionError / TypeError
    assert "Traceback" not in text and "--debug" not in text


@pytest.mark.parametrize("template, verb, message", [
    # a string doubled 64 times (2**64 characters): before, a load process reached 14.3 GiB and exit 130
    ("{% set n = namespace(s='x') %}{% for i in range(64) %}{% set n.s = n.s ~ n.s %}{% endfor %}", "run",
     "'~' would build"),
    # a loop of 10**10 steps: before, killed 56 s after the run's end with 0 records, exit 130
    ("{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}", "check",
     "still rendering after 5 s"),
])
def test_a_hostile_chat_template_is_refused_at_validation_naming_the_file(tmp_path: Path, template: str, verb: str,
                                                                          message: str) -> None:
    _model(tmp_path / "model", template)
    scenario = _scenario(tmp_path, tokenizer="model")
    args: list[str | Path] = ["scenario", "check", scenario] if verb == "check" else ["run", scenario, "--dry-run"]
    code, text, seconds, peak = _cli(*args, cwd=tmp_path)
    assert code == 2, text
    assert f"chat template {tmp_path / 'model' / 'chat_template.jinja'}: {message}" in text
    assert seconds < 30 and peak < 1200, (seconds, peak)  # the trial child's 1 GiB cap at most


@pytest.mark.parametrize("args, line", [
    (["simulate", "demo", "--scale", "inf"], "error: --scale takes a finite number in (0, 1,000], got inf"),
    (["plan", "demo", "--steps", "100000"], "error: --steps takes a count from 1 to 100, got 100,000"),
    (["plan", "demo", "--gpu-hour-price", "nan"], "error: --gpu-hour-price takes a finite number"),
    (["plan", "demo", "--scale", "1..inf"], "error: --scale '1..inf' with --steps 4: need 0 < LOW < HIGH <= 1000"),
    (["sweep", "demo", "--scale", "nan,1"], "error: --scale 'nan,1': at most 100 scales"),
    (["run", "demo", "--processes", "-1", "--dry-run"], "error: --processes takes a count from 1 to 1,024, got -1"),
    (["compare", "a", "b", "--alpha", "nan"], "error: --alpha takes a finite number in (0, 1), got nan"),
    (["simulate", "demo", "--grow", "x=inf"], "error: --grow 'x=inf': use PERSONA=FACTOR with a factor in (0, 1000]"),
    (["study", "--simulate", "--quick", "--k", "1,100000"], "error: --k '1,100000': a list of tier counts from 1 to"),
])
def test_absurd_numeric_flags_are_one_line_exit_2(tmp_path: Path, args: list[str], line: str) -> None:
    code, text, _, _ = _cli(*args, cwd=tmp_path)
    assert code == 2 and _rows(text) == [_rows(text)[0]] and _rows(text)[0].startswith(line), text
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_a_template_that_fails_only_mid_run_stops_the_load_and_the_run_says_so(tmp_path: Path) -> None:
    """The trial renders short conversations; this template bombs from the sixth message on (a session's third
    turn): the load process records the attempt not sent, stops its load, and the run exits 2 naming the file."""
    _model(tmp_path / "model", "{% if messages|length > 5 %}{{ 'x' * 99999 * 99999 }}{% endif %}"
                               "{% for m in messages %}{{ m.content }}{% endfor %}")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: mid-run\ntarget: {url: testbed, profile: vllm, testbed: {preset: tiny, replicas: 1, speed: 10}, "
        "metrics: null, tokenizer: model, dialect: openai-chat}\ncalibration: {probes: 0}\n"
        "tiers: [{name: interactive, priority: 0}]\npersonas:\n  - {kind: chat, name: users, tier: interactive, "
        "arrival: {process: poisson, rate: 4}, turns: 4, think_time_s: 0.1, prompt_tokens: 30, output_tokens: 4, "
        "system_prompt_tokens: 10}\nphases: [{name: main, duration: 3s}]\ndrain_s: 2\n")
    code, text, seconds, _ = _cli("run", scenario, "--no-report", "--out", tmp_path / "runs", cwd=tmp_path)
    assert code == 2, text
    assert f"error: chat template {tmp_path / 'model' / 'chat_template.jinja'}: '*' would build" in text
    assert "stop reason: template_error" in text and seconds < 60
    manifest = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert manifest["stop_reason"] == "template_error" and "chat_template.jinja" in manifest["error"]
    records = [json.loads(line) for shard in (tmp_path / "runs").glob("*/records/*.jsonl")
               for line in shard.read_text().splitlines()]
    refused = [r for r in records if r.get("kind") == "request" and r.get("reason") == "template"]
    assert refused and all(r["not_sent"] for r in refused)  # never counted as served
    run_dir = next((tmp_path / "runs").glob("*/run.json")).parent
    _cli("audit", run_dir, cwd=tmp_path)
    reasons = json.loads((run_dir / "summary.json").read_text())["validity"]["reasons"]
    assert any("chat template could not render" in r for r in reasons), reasons  # the input's fault, said so
    assert not any("out of slots" in r for r in reasons), reasons  # never blamed on the generator
