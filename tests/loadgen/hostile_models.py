"""A model folder made by a test: a tiny word-level tokenizer (no download) and the chat template under test."""

from __future__ import annotations

from pathlib import Path


def model_with_template(folder: Path, template: str) -> Path:
    """``folder`` with ``tokenizer.json`` and ``chat_template.jinja`` holding ``template``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir()
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "chat_template.jinja").write_text(template)
    return folder


# Linux keeps a process's peak RSS across fork and exec, so a command forked from pytest would report pytest's
# own peak: a small launcher starts it instead and reports the command's peak (its children included, via wait4).
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
open(sys.argv[1], "w").write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def run_measured(cmd: list[str], cwd: Path) -> tuple[int, str, float, float]:
    """(exit code, stdout + stderr, seconds, peak RSS in MB of ``cmd`` and its children)."""
    import subprocess
    import sys
    import tempfile
    import time

    with tempfile.NamedTemporaryFile("r", suffix=".rusage") as report:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", _LAUNCHER, report.name, *cmd], cwd=cwd, capture_output=True,
                              text=True, timeout=300)
        seconds = time.monotonic() - started
        code, peak_kb = report.read().split()
    return int(code), done.stdout + done.stderr, seconds, int(peak_kb) / 1024
