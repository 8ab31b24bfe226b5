"""A chat template trial-rendered in a child process with a memory and a time limit, before any run.

The parent (``trial_render``) starts ``python -m rushhour.loadgen.template_trial FOLDER`` and waits at most
``TRIAL_WALL_S``; the child caps its own address space (``RLIMIT_AS``) and CPU time (``RLIMIT_CPU``) before
it imports jinja2, then renders a few conversations like the ones a run sends, each under the render caps
of ``loadgen.chat_template``. A template that loops, builds gigabytes or cannot compile is refused in
one line naming its file; one that merely refuses a conversation shape (``raise_exception``) is not.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

TRIAL_MEMORY_BYTES = 1 << 30  # the child's whole address space: a real template needs a few megabytes
TRIAL_CPU_S = 30  # a backstop under the wall-time limit
TRIAL_WALL_S = 20.0  # start-up, then every conversation under its own MAX_RENDER_S
REFUSED = 2  # the child's exit code for a template over a cap (its one line says why)

_CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}
_PARAMETERS = {"type": "object", "properties": {"path": {"type": "string"}}}
_TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "read a file",
                                            "parameters": _PARAMETERS}}]
TRIALS: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = [
    ([{"role": "user", "content": "hello"}], None),
    ([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"},
      {"role": "assistant", "content": "hi"}, {"role": "user", "content": "and again"}], None),
    ([{"role": "system", "content": "a coding agent"}, {"role": "user", "content": "fix the bug"},
      {"role": "assistant", "content": "", "tool_calls": [_CALL]},
      {"role": "tool", "content": "print(1)", "tool_call_id": "call_1"}, {"role": "user", "content": "go on"}], _TOOLS),
]


def trial_render(folder: Path, template_file: str) -> str | None:
    """None when the template in ``folder`` renders the trials within the caps, else one line naming the file."""
    cmd = [sys.executable, "-m", "rushhour.loadgen.template_trial", str(folder)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TRIAL_WALL_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # this child only, by its PID
        proc.wait()
        return f"chat template {template_file}: still rendering after {TRIAL_WALL_S:g} s (the cap): a loop?"
    line = out.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    if proc.returncode == 0:
        return None
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        why = "its CPU time" if name == "SIGXCPU" else "its memory or a crash"
        return f"chat template {template_file}: the trial render was killed by {name} ({why} cap)"
    return f"chat template {template_file}: {line[0][:300] or f'the trial render failed (exit {proc.returncode})'}"


def _limit_self() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (TRIAL_MEMORY_BYTES, TRIAL_MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (TRIAL_CPU_S, TRIAL_CPU_S + 5))


def main(argv: list[str]) -> int:
    """Render the trials with the folder's template: exit 0, or ``REFUSED`` and one line on stdout."""
    _limit_self()
    try:
        from rushhour.loadgen.chat_template import TemplateError, compile_template, render
        from rushhour.loadgen.tokens import TokenizerError, read_chat_template, read_config, token_text

        folder = Path(argv[0])
        config = read_config(folder)
        source, _ = read_chat_template(folder, config)
        if source is None:
            return 0
        special = {n: token_text(config.get(n)) for n in ("bos_token", "eos_token", "unk_token", "pad_token")}

        def raise_exception(message: str) -> None:
            raise TokenizerError(message)

        template = compile_template(source, raise_exception)
        for messages, tools in TRIALS:
            values = {k: v for k, v in special.items() if v is not None}
            try:
                render(template, dict(values, messages=messages, tools=tools, add_generation_prompt=True))
            except TemplateError:
                raise
            except Exception:  # a template may refuse a shape of conversation: not a cap
                continue
    except (TemplateError, TokenizerError) as exc:
        print(exc, flush=True)
        return REFUSED
    except MemoryError:
        print("ran out of memory while rendering (the trial's cap)", flush=True)
        return REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
