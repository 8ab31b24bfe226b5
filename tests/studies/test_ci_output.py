"""Fit for CI logs: the real CLI in a subprocess, its stdout a pipe (not a terminal)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from support import cli_command, cli_env

from .test_cli import _run_dir

CLI = cli_command()


def _env() -> dict[str, str]:
    return cli_env(columns=80)


def test_compare_into_a_closed_pipe_keeps_exit_0(tmp_path: Path) -> None:
    base, twin = _run_dir(tmp_path, "base", 1), _run_dir(tmp_path, "twin", 2)
    whole = subprocess.run([*CLI, "compare", str(base), str(twin)], capture_output=True, text=True, env=_env(),
                           timeout=300)
    assert whole.returncode == 0, whole.stderr
    # the reader leaves before a byte is written: every write meets a broken pipe
    proc = subprocess.Popen([*CLI, "compare", str(base), str(twin)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "Broken pipe" not in err and "Traceback" not in err
    # and through a real `head -1`
    line = " ".join(shlex.quote(a) for a in [*CLI, "compare", str(base), str(twin)])
    shell = subprocess.run(["bash", "-c", f"{line} | head -1 >/dev/null; exit ${{PIPESTATUS[0]}}"],
                           capture_output=True, text=True, env=_env(), timeout=300)
    assert shell.returncode == 0, shell.stderr


def test_dry_run_table_is_whole_when_piped() -> None:
    """The dry-run table in a CI log: tier, persona and kind names whole, not 'interac…'."""
    res = subprocess.run([*CLI, "run", "maintenance", "--dry-run"], capture_output=True, text=True, env=_env(),
                         timeout=300)
    assert res.returncode == 0, res.stderr
    text = res.stdout + res.stderr
    assert "│ interactive │ chat-users │ chat" in text
    assert "agent_swarm" in text and "…" not in text


def test_tables_and_paths_are_whole_when_piped(tmp_path: Path) -> None:
    """`rushhour audit` into a pipe: the tier table uncut and the summary path on one line."""
    from tests.audit.helpers import RunBuilder

    deep = tmp_path / ("a-rather-long-folder-name-for-ci-" * 3) / "runs"
    tiers = [{"name": "interactive-premium-tier", "priority": 1, "slo": {}},
             {"name": "default-bulk-tier", "priority": 0, "slo": {}}]
    run = RunBuilder(deep, tiers=tiers)
    for i in range(20):
        run.request(tier=tiers[i % 2]["name"], sent_ns=i * 100_000_000)
    run_dir = run.close()
    res = subprocess.run([*CLI, "audit", str(run_dir)], capture_output=True, text=True, env=_env(), timeout=300)
    assert res.returncode == 0, res.stderr
    assert len(str(run_dir)) > 120
    assert f"summary: {(run_dir / 'summary.json').resolve()}\n" in res.stdout
    assert "interactive-premium-tier" in res.stdout and "default-bulk-tier" in res.stdout
    assert "…" not in res.stdout
