"""The Locust command line the runner builds."""

from __future__ import annotations

from pathlib import Path

from rushhour.loadgen.runner import RunOptions, locust_command
from rushhour.records.record import Anchor


def _cmd(processes: int) -> list[str]:
    return locust_command(RunOptions(processes=processes), Path("/tmp/run"), "rid", Anchor.now(),
                          "http://127.0.0.1:1", 30.0)


def _value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_each_multi_process_run_gets_its_own_master_port() -> None:
    """Two runs at once must not both bind Locust's default 5557 (seen: 'Address already in use')."""
    a, b = _cmd(2), _cmd(2)
    assert _value(a, "--master-bind-port") == _value(a, "--master-port") != "5557"
    assert _value(a, "--master-bind-port") != _value(b, "--master-bind-port")
    assert _value(a, "--master-bind-host") == "127.0.0.1"


def test_single_process_runs_have_no_master() -> None:
    cmd = _cmd(1)
    assert "--processes" not in cmd and "--master-bind-port" not in cmd
    assert "--headless" in cmd


def test_web_mode_gets_its_own_ui_port() -> None:
    cmd = locust_command(RunOptions(web=True), Path("/tmp/run"), "rid", Anchor.now(), "http://127.0.0.1:1", 30.0)
    assert "--headless" not in cmd and _value(cmd, "--web-host") == "127.0.0.1"
    assert int(_value(cmd, "--web-port")) > 0
