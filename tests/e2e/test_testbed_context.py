"""One meaning of `url: testbed`, said where it bites: `scenario check` and `run --dry-run` count the trace rows
and dataset conversations that exceed the testbed's context, and a real run's 400s agree; the README's scenario
runs as is against `rushhour serve`."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO, cli_command, cli_env, rushhour

from rushhour.fits import context_warnings
from rushhour.scenarios import parse_scenario

pytestmark = pytest.mark.e2e


# the Mooncake trace at 10× speed: its first 60 s of rows in 6 s, against the default testbed (tiny × 1)
MOONCAKE = """\
name: moon
target: {url: testbed, testbed: {speed: 20, config: {max_num_seqs: 64}}}
calibration: {probes: 0}
drain_s: 5
tiers:
  - {name: batch}
personas:
  - {kind: trace_replay, name: replay, tier: batch, trace: mooncake_fast25_conversation_trace.jsonl, time_scale: 10}
phases:
  - {name: steady, duration: 6}
"""


def _refused_for_context(run_dir: Path) -> tuple[int, int]:
    """(requests the testbed refused for their length, requests answered) from the run's records."""
    refused = answered = 0
    for shard in (run_dir / "records").glob("*.jsonl"):
        for line in shard.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind", "request") != "request" or "status" not in rec:
                continue
            answered += 1
            refused += rec["status"] == 400 and "maximum context length" in (rec.get("error") or "")
    return refused, answered


def test_check_and_dry_run_count_the_rows_a_real_run_gets_refused(tmp_path: Path) -> None:
    (tmp_path / "moon.yaml").write_text(MOONCAKE)
    check = rushhour("scenario", "check", "moon.yaml", cwd=tmp_path, script=True)
    assert check.returncode == 0, check.stderr  # it runs: a warning, not an error
    said = re.search(r"persona 'replay': (\d+) of the (\d+) rows of trace 'mooncake_fast25_conversation_trace"
                     r"\.jsonl' the run sends exceed the testbed's 4,096-token context", check.stderr)
    assert said, check.stderr
    assert "give target.testbed.preset: h100-llama8b" in check.stderr
    over, rows = int(said[1]), int(said[2])
    assert 0 < over < rows
    dry = rushhour("run", "moon.yaml", "--dry-run", cwd=tmp_path, script=True)
    assert dry.returncode == 0, dry.stderr
    text = dry.stdout + dry.stderr
    assert "target: the embedded testbed: preset tiny × 1 replica(s), 64 sequences and a 4,096-token context" in text
    assert f"warning: persona 'replay': {over} of the {rows} rows" in text
    done = rushhour("run", "moon.yaml", "--no-report", "--out", "runs", cwd=tmp_path, script=True)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert _refused_for_context(run_dir) == (over, rows)  # the warning's count is the testbed's own


def test_a_bigger_preset_or_a_real_target_warns_of_nothing() -> None:
    scenario = parse_scenario(MOONCAKE.replace("speed: 20", "speed: 20, preset: h100-llama8b"))
    assert context_warnings(scenario) == []
    assert context_warnings(parse_scenario(MOONCAKE.replace("url: testbed", "url: http://127.0.0.1:9"))) == []


def test_a_dataset_conversation_longer_than_the_context_is_counted(tmp_path: Path) -> None:
    long = {"conversations": [{"from": "human", "value": "x" * 20_000}, {"from": "gpt", "value": "ok"}]}
    short = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(d) for d in (long, short, short)) + "\n")
    scenario = parse_scenario(f"""\
name: d
tiers: [{{name: t}}]
personas:
  - {{kind: chat, name: chat, tier: t, arrival: {{rate: 1}}, dataset: {{path: {tmp_path / 'd.jsonl'}}}}}
""")
    (line,) = context_warnings(scenario)
    assert "persona 'chat': 1 of the 3 conversations of dataset" in line and "4,096-token context" in line


def _readme_scenario() -> str:
    section = (REPO / "README.md").read_text().split("## Scenarios", 1)[1]
    found = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert found, "README's Scenarios section has no yaml block"
    return found[1]


@pytest.fixture
def served() -> Iterator[str]:
    """`rushhour serve` as a user starts it (defaults but the port), stopped by PID."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([*cli_command(script=True), "serve", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"testbed listening on http://127.0.0.1:{port}"
        assert "models: testbed, meta-llama/Llama-3.1-8B-Instruct" in proc.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_readme_scenario_runs_against_rushhour_serve(served: str, tmp_path: Path) -> None:
    text = _readme_scenario()
    assert 'url: "http://127.0.0.1:8000"' in text  # `rushhour serve`'s own port: as is, but for this test's
    (tmp_path / "my-stack.yaml").write_text(text)
    started = time.monotonic()
    done = rushhour("run", "my-stack.yaml", "--target", served, "--duration", "4s", "--no-report",
                     "--out", "runs", cwd=tmp_path, script=True)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    statuses: dict[int, int] = {}
    for shard in (run_dir / "records").glob("*.jsonl"):
        for line in shard.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind", "request") == "request" and "status" in rec:
                statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
    assert statuses.get(200, 0) > 0 and 404 not in statuses, statuses  # the model is served: no 404
    assert time.monotonic() - started < 120


def test_a_swarm_whose_shared_context_alone_is_over_is_named() -> None:
    text = _readme_scenario().replace('url: "http://127.0.0.1:8000"', "url: testbed")
    (line,) = context_warnings(parse_scenario(text))
    assert line.startswith("persona 'coding-agents': every call carries shared_context_tokens 12,000, over the "
                           "testbed's 4,096-token context (preset tiny)"), line
    bigger = text.replace("url: testbed", "url: testbed, testbed: {preset: h100-llama8b}")
    assert context_warnings(parse_scenario(bigger)) == []
