"""The suite's shared test support: one CLI runner, one scenario builder, one run helper, one script loader."""

from __future__ import annotations

from support.cli import REPO, cli_command, cli_env, rushhour
from support.runs import run
from support.scenario import scenario, write_scenario
from support.scripts import load_script

__all__ = ["REPO", "cli_command", "cli_env", "load_script", "run", "rushhour", "scenario", "write_scenario"]
