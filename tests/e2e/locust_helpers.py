"""Shared bits of the tests that run a plain locustfile: run Locust until the testbed served a chat request."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path


def served_chat(ledger: Path) -> bool:
    """Has the testbed served an interactive (chat) request yet? (its ledger: one JSON line per decision)"""
    if not ledger.exists():
        return False
    lines = [json.loads(x) for x in ledger.read_text().splitlines() if x.endswith("}")]
    return any(x["outcome"] == "served" and x["objective"] == "interactive" for x in lines)


def locust_until_chat_served(cmd: list[str], ledger: Path, stderr: Path, cwd: Path,
                             env: dict[str, str] | None = None) -> int:
    """Run Locust (``cmd``, with a long ``-t``) until the testbed served a chat request, then stop it as a user
    does (SIGTERM, a clean quit); its exit code. No fixed short run: the idle probes come first, and on a loaded
    machine they took most of a 12 s run (its users then sent at 15 s and were cut off at once: nothing served)."""
    with stderr.open("wb") as err:
        run = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            while run.poll() is None and not served_chat(ledger):
                time.sleep(0.2)
            run.send_signal(signal.SIGTERM)
            return run.wait(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
