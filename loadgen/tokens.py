"""A scenario's tokenizer: exact token counts for prompt pieces and for whole prompts as the server counts them.

Loaded from a local ``tokenizer.json`` (or a model folder holding one) with the ``tokenizers`` package;
nothing is ever downloaded. For the chat dialect the server renders the model's chat template around
the messages before it tokenizes, so the count of a whole prompt renders that same template here (from
``chat_template.jinja`` or ``tokenizer_config.json`` next to the tokenizer) and counts the result, the
way vLLM does: chat prompts without the tokenizer's own special tokens (the template writes them),
completion prompts with them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPENAI_CHAT = "openai-chat"
OPENAI_COMPLETIONS = "openai-completions"
MAX_TEMPLATE_BYTES = 1 << 20  # real chat templates are a few kilobytes


class TokenizerError(ValueError):
    """The scenario's tokenizer cannot be loaded (one line, names the path)."""


@dataclass(slots=True)
class Tokenizer:
    """One loaded tokenizer, with the chat template and special tokens of its folder when there are some."""

    path: str
    backend: Any  # tokenizers.Tokenizer
    chat_template: str | None = None
    special: dict[str, str] | None = None
    _template: Any = None
    template_file: str | None = None  # where the chat template came from, for its errors
    broken: str | None = None  # a render over a cap: every later render fails at once with it (no 5 s stall each)

    def count(self, text: str, special: bool = False) -> int:
        """Tokens in ``text`` (``special``: with the tokenizer's own added BOS/EOS, as a completion prompt)."""
        return len(self.backend.encode(text, add_special_tokens=special).ids)

    def prefix(self, text: str, tokens: int) -> str:
        """The longest prefix of ``text`` that is exactly ``tokens`` tokens long (``text`` must be long enough).

        Cut at a token's end offset, then checked: BPE may tokenize a cut word differently from the
        whole, so neighbouring cuts are tried until one counts exactly; the nearest below if none does.
        """
        enc = self.backend.encode(text, add_special_tokens=False)
        offsets = enc.offsets
        if tokens >= len(offsets):
            return text
        best = ""
        for k in (tokens, tokens + 1, tokens - 1, tokens + 2, tokens - 2, tokens + 3):
            if k < 1 or k > len(offsets):
                continue
            cut = text[: offsets[k - 1][1]]
            n = self.count(cut)
            if n == tokens:
                return cut
            if n < tokens and len(cut) > len(best):
                best = cut
        return best

    def render_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str | None:
        """The chat prompt the server builds from ``messages`` and ``tools`` (None without a chat template)."""
        if self.chat_template is None:
            return None
        from rushhour.loadgen.chat_template import TemplateError, render

        if self.broken is not None:
            raise TokenizerError(self.broken)
        try:
            if self._template is None:
                self._template = _compile(self.chat_template)
            values = dict(self.special or {})
            return render(self._template, dict(values, messages=messages, tools=tools, add_generation_prompt=True))
        except TemplateError as exc:
            self.broken = f"chat template {self.template_file}: {exc}"
            raise TokenizerError(self.broken) from None

    def prompt_tokens(
        self,
        dialect: str,
        system: str,
        messages: list[tuple[str, str]],
        flat: str,
        tools: list[dict[str, Any]] | None = None,
        calls: dict[int, Any] | None = None,
    ) -> tuple[int, bool]:
        """(tokens the server will count for this prompt, whether that count is exact).

        Tools are passed to the chat template as transformers does (``tools=``); a template that does
        not render them leaves them out of the count, as the server's does.
        """
        if dialect == OPENAI_COMPLETIONS:
            return self.count(flat, special=True), True
        if dialect == OPENAI_CHAT:
            chat: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
            found = calls or {}
            chat += [_template_message(role, content, found.get(i)) for i, (role, content) in enumerate(messages)]
            rendered = self.render_chat(chat, tools)
            if rendered is not None:
                return self.count(rendered), True
        # no template (or a dialect whose framing the server keeps to itself): the content only
        pieces = ([system] if system else []) + [c for _, c in messages]
        pieces += [call.text for i, call in (calls or {}).items() if messages[i][0] == "assistant"]
        return sum(self.count(c) for c in pieces), False


def _template_message(role: str, content: str, call: Any) -> dict[str, Any]:
    """One message as vLLM hands it to the chat template: a tool call's arguments parsed into a dict."""
    if call is None:
        return {"role": role, "content": content}
    if role == "tool":
        return {"role": role, "content": content, "tool_call_id": call.id}
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = call.arguments
    fn = {"name": call.name, "arguments": arguments}
    return {"role": role, "content": content, "tool_calls": [{"id": call.id, "type": "function", "function": fn}]}


def load(path: str | Path) -> Tokenizer:
    """Load ``tokenizer.json`` (a file, or a folder holding one) and the chat template beside it."""
    where = Path(path).expanduser()
    file = where / "tokenizer.json" if where.is_dir() else where
    if not file.is_file():
        raise TokenizerError(f"tokenizer {str(path)!r}: no tokenizer.json there (rushhour never downloads one)")
    try:
        from tokenizers import Tokenizer as Backend
    except ImportError:  # pragma: no cover - a dependency of rushhour
        raise TokenizerError("the 'tokenizers' package is not installed") from None
    try:
        backend = Backend.from_file(str(file))
    except Exception as exc:  # the Rust side raises its own exception type
        raise TokenizerError(f"tokenizer {str(file)!r} cannot be read: {str(exc)[:200]}") from None
    folder = file.parent
    config = read_config(folder)
    template, template_file = read_chat_template(folder, config)
    special = {name: token_text(config.get(name)) for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
    return Tokenizer(str(file), backend, template, {k: v for k, v in special.items() if v is not None},
                     template_file=template_file)


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{path}: not readable JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


def read_chat_template(folder: Path, config: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the chat template, where it is): ``chat_template.jinja`` first (transformers ≥ 4.50 writes it), then the
    config's."""
    path = folder / "chat_template.jinja"
    if path.is_file():
        if path.stat().st_size > MAX_TEMPLATE_BYTES:
            raise TokenizerError(f"chat template {path}: more than {MAX_TEMPLATE_BYTES:,} bytes")
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"chat template {path}: not readable UTF-8 text ({exc})") from None
    value = config.get("chat_template")
    if isinstance(value, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default")
    if isinstance(value, str) and len(value) > MAX_TEMPLATE_BYTES:
        raise TokenizerError(f"chat template in {folder / 'tokenizer_config.json'}: more than {MAX_TEMPLATE_BYTES:,} "
                             "bytes")
    return (value, f"{folder / 'tokenizer_config.json'} (chat_template)") if isinstance(value, str) else (None, None)


def token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _compile(source: str) -> Any:
    """The template compiled as transformers (and so vLLM) does (sandboxed, trim_blocks, lstrip_blocks), bounded."""
    from rushhour.loadgen.chat_template import compile_template

    def raise_exception(message: str) -> None:
        raise TokenizerError(f"chat template: {message}")

    return compile_template(source, raise_exception)
