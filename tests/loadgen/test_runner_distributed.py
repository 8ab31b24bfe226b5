"""The runner's multi-host side: the master's command line, and what it refuses before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rushhour.loadgen.runner import RunOptions, locust_command, run_scenario
from rushhour.scenarios import ScenarioError

SCENARIO = """
name: remote
target: {url: testbed, profile: llm-d, model: m}
tiers:
  - {name: interactive, priority: 100}
personas:
  - {kind: chat, name: chat, tier: interactive, arrival: {rate: 2}}
phases:
  - {name: main, duration: 5s}
"""


def _value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_the_master_waits_for_its_workers_and_takes_the_anchor_itself() -> None:
    opts = RunOptions(expect_workers=3, master_bind="10.0.0.5", master_port=6001, workers_wait_s=45)
    cmd = locust_command(opts, Path("/tmp/run"), "rid", None, "http://10.0.0.9:8000", 30.0)
    assert "--master" in cmd and "--processes" not in cmd
    assert _value(cmd, "--expect-workers") == "3" and _value(cmd, "--expect-workers-max-wait") == "45"
    assert _value(cmd, "--master-bind-host") == "10.0.0.5" and _value(cmd, "--master-bind-port") == "6001"
    assert _value(cmd, "-u") == _value(cmd, "--rh-workers") == "3"
    assert _value(cmd, "--rh-ship") == "1"
    # no anchor yet: the master takes it when every worker has joined (loadgen/engine/locustfile.py)
    assert _value(cmd, "--rh-mono-anchor-ns") == _value(cmd, "--rh-wall-anchor-ns") == "0"


def test_remote_workers_cannot_reach_the_embedded_testbed(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    with pytest.raises(ScenarioError, match="out of remote workers' reach"):
        run_scenario(path, RunOptions(out_dir=tmp_path / "runs", expect_workers=2, master_bind="0.0.0.0"))
    assert not (tmp_path / "runs").exists()  # refused before a run folder was made
