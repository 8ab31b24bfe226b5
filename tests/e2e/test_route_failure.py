"""An invalid port is refused at validation; a route a load process cannot build fails it once, never in a loop."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from support import rushhour

from rushhour.loadgen.runner import RunOptions, _start_failure, locust_command, run_scenario
from rushhour.loadgen.testbed_proc import child_env
from rushhour.records.manifest import write_manifest
from rushhour.records.record import START_FAILED_MARK, Anchor, shard_paths
from rushhour.scenarios import ScenarioError, parse_scenario

SCENARIO = """
name: r
target: {{url: "{url}", profile: vllm, metrics: null}}
tiers: [{{name: t}}]
calibration: {{probes: 0}}
personas: [{{kind: chat, name: c, tier: t, arrival: {{rate: 5}}, turns: 1, prompt_tokens: 8, output_tokens: 4}}]
phases: [{{name: p, duration: 2s}}]
drain_s: 1
"""


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:0", "http://127.0.0.1:http",
                                 "http://:8000", "http://[::1"])
def test_an_invalid_port_or_host_is_refused_at_validation(url: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(SCENARIO.format(url=url), "s.yaml")
    assert "target.url" in str(info.value)


def test_a_fallback_with_an_invalid_port_is_refused() -> None:
    text = SCENARIO.format(url="http://127.0.0.1:8000") + (
        "resilience: {fallback: [{name: b, url: 'http://127.0.0.1:70000'}]}\n")
    with pytest.raises(ScenarioError, match="fallback"):
        parse_scenario(text, "s.yaml")


def test_a_target_override_with_an_invalid_port_is_refused(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(url="http://127.0.0.1:8000"))
    with pytest.raises(ScenarioError, match="65535"):
        run_scenario(str(scenario), RunOptions(out_dir=tmp_path / "runs", target="http://127.0.0.1:99999"))
    assert not (tmp_path / "runs").exists()  # refused before a run folder was made


@pytest.mark.e2e
def test_a_load_process_that_cannot_build_its_route_quits_once(tmp_path: Path) -> None:
    """The check the runner does first is bypassed: Locust itself gets a URL it cannot build."""
    run_dir = tmp_path / "run"
    (run_dir / "records").mkdir(parents=True)
    scenario = parse_scenario(SCENARIO.format(url="http://127.0.0.1:9"))
    write_manifest(run_dir, {"run_id": "r", "scenario": scenario.model_dump(mode="json")})
    cmd = locust_command(RunOptions(), run_dir, "r", Anchor.now(), "http://127.0.0.1:99999", total_s=5.0)
    log_path = run_dir / "locust.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=child_env(), timeout=180)
    elapsed = time.monotonic() - started
    text = log_path.read_bytes()
    assert text.count(START_FAILED_MARK.encode()) == 1, text[-3000:]
    assert len(text) < 64 * 1024  # one line, not a traceback per retry (48 MB were seen)
    assert proc.returncode == 3
    assert shard_paths(run_dir) == []  # no shard opened (and leaked) for a route that does not exist
    assert elapsed < 25.0  # quit at once; the -t cap of this command is 28 s (generous for a busy machine)
    line = _start_failure(log_path)
    assert line is not None and "99999" in line and "\n" not in line


PLANTED = """
import sys
if "--rh-run-dir" in sys.argv:  # only the Locust process a run starts
    import rushhour.loadgen.prompts as prompts
    def _fail():
        raise RuntimeError("planted: the prompt base cannot be built")
    prompts.warm = _fail
"""


def test_a_runs_only_process_failing_before_its_anchor_is_a_one_line_startup_error(tmp_path: Path) -> None:
    """A run's only process takes the anchor after its context is built: a build that fails leaves no anchor, and
    the run ends as a start-up error in the process's own words, not a wait or a run measured from nothing."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(PLANTED)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(url="http://127.0.0.1:9"))
    done = rushhour("run", str(scenario), "--out", str(tmp_path / "runs"), "--no-report", inject=inject, timeout=180)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "a load process cannot start: RuntimeError: planted" in done.stdout + done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["stop_reason"] == "startup_error" and not (run_dir / "anchor.json").exists()
    assert shard_paths(run_dir) == []
