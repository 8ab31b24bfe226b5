"""A scenario's tokenizer: exact token counts for prompt pieces and for whole prompts as the server counts them.

Loaded from a local ``tokenizer.json`` (or a model folder holding one) with the ``tokenizers`` package;
nothing is ever downloaded. For the chat dialect the server renders the model's chat template around
the messages before it tokenizes, so the count of a whole prompt renders that same template here (from
``chat_template.jinja`` or ``tokenizer_config.json`` next to the tokenizer) and counts the result, the
way vLLM does: chat prompts without the tokenizer's own special tokens (the template writes them),
completion prompts with them.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPENAI_CHAT = "openai-chat"
OPENAI_COMPLETIONS = "openai-completions"
MAX_TEMPLATE_BYTES = 1 << 20  # real chat templates are a few kilobytes
MAX_PREFIX_COUNTS = 65536  # counted starts of rendered prompts kept (a 20-byte digest and an int each)


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
    # Where an encoding runs: here (None), or handed to ``offload`` (a load process: a thread of its own, so the
    # loop runs meanwhile; loadgen/engine/tokenize.py). Only the encoding moves: a template renders on the caller's
    # thread, where its time cap (SIGALRM) holds.
    offload: Callable[[Callable[[], Any]], Any] | None = None
    # counts of rendered prompts' starts, each cut just before a special token (digest of the start -> tokens)
    _prefix_counts: dict[bytes, int] | None = None
    _cuts: Any = None  # the special tokens a rendered prompt may be cut before (a regex), False: none
    _counting: Any = None  # one count at a time (made at first use: a load process's is gevent's, cooperative)

    def encode(self, text: str, special: bool = False) -> Any:
        """``text``'s encoding (a ``tokenizers.Encoding``).

        Through ``encode_batch``, which releases the GIL while Rust works (``encode`` holds it: a 30k-token
        prompt held every other thread for 0.2–0.3 s); read with ``len`` and ``token_to_chars``, never ``ids`` or
        ``offsets``, which build Python lists of every token under the GIL.
        """
        def run() -> Any:
            return self.backend.encode_batch([text], add_special_tokens=special)[0]

        return run() if self.offload is None else self.offload(run)

    def count(self, text: str, special: bool = False) -> int:
        """Tokens in ``text`` (``special``: with the tokenizer's own added BOS/EOS, as a completion prompt)."""
        return len(self.encode(text, special))

    def prefix(self, text: str, tokens: int) -> str:
        """The longest prefix of ``text`` that is exactly ``tokens`` tokens long (``text`` must be long enough)."""
        cut = self.prefix_or_none(text, tokens)
        return text if cut is None else cut

    def prefix_or_none(self, text: str, tokens: int) -> str | None:
        """``prefix(text, tokens)``, or None when ``text`` has no more than ``tokens`` tokens (one encoding for both).

        Cut at a token's end offset, then checked: BPE may tokenize a cut word differently from the
        whole, so neighbouring cuts are tried until one counts exactly; the nearest below if none does.
        """
        enc = self.encode(text)
        total = len(enc)
        if tokens >= total:
            return None
        best = ""
        for k in (tokens, tokens + 1, tokens - 1, tokens + 2, tokens - 2, tokens + 3):
            if k < 1 or k > total:
                continue
            cut = text[: enc.token_to_chars(k - 1)[1]]
            n = self.count(cut)
            if n == tokens:
                return cut
            if n < tokens and len(cut) > len(best):
                best = cut
        return best

    def count_rendered(self, text: str) -> int:
        """``count(text)`` for a rendered chat prompt, encoding only what follows its longest start counted before.

        A conversation re-sends its history, so each request's prompt starts with an earlier one's. The tokenizer
        splits its input at special tokens before anything else and encodes the parts apart, so the tokens before
        a special token do not depend on what follows it: a start that ends just before one has a count of its
        own, kept here by its digest. Only special tokens that match alone are cut before (no ``lstrip``, which
        would take the start's trailing space, no ``single_word``, which looks at the character before, not
        normalized), and a count is kept only where an encoding shows that very token starting at the cut. The
        rest is encoded a message at a time, each count kept as soon as it is known, so that requests sharing a
        start (an agent swarm's shared context) find it counted while the first of them is still counting.
        """
        cut_re = self._cut_pattern()
        if cut_re is None:
            return self.count(text)
        if self._counting is None:
            self._counting = threading.Lock()
        # one at a time: requests that share a start (a swarm's first agents) wait for the first to count it, then
        # find it counted, rather than all encoding it at once
        with self._counting:
            return self._count_from_known(text, cut_re)

    def _count_from_known(self, text: str, cut_re: Any) -> int:
        known = self._prefix_counts if self._prefix_counts is not None else {}
        self._prefix_counts = known
        digest = hashlib.sha1(usedforsecurity=False)  # a cache key (SHA-NI: 4× faster than blake2b here)
        cuts: list[tuple[int, int, bytes]] = []  # (position, token length, digest of the text before it)
        done = 0
        for match in cut_re.finditer(text):
            if match.start() == 0:
                continue
            digest.update(text[done : match.start()].encode("utf-8", "surrogatepass"))
            done = match.start()
            cuts.append((done, match.end() - done, digest.copy().digest()))
        start, before = 0, 0
        i = 0
        while True:
            # the longest start counted so far, by this call or another (every count keeps its cuts in order)
            while i < len(cuts) and (found := known.get(cuts[i][2])) is not None:
                start, before = cuts[i][0], found
                i += 1
            if i >= len(cuts):
                break
            at, length, key = cuts[i]
            enc = self.encode(text[start : at + length])
            index = enc.char_to_token(at - start)
            if index is not None and enc.token_to_chars(index) == (at - start, at - start + length):
                start, before = at, before + index
                if len(known) >= MAX_PREFIX_COUNTS:
                    known.pop(next(iter(known)))  # the oldest
                known[key] = before
            # else not a cut after all (another token took those characters): the next segment includes it
            i += 1
        return before + len(self.encode(text[start:])) if start < len(text) else before

    def _cut_pattern(self) -> Any:
        """A regex of the special tokens a rendered prompt can be cut before (None: this tokenizer has none)."""
        if self._cuts is None:
            try:
                added = self.backend.get_added_tokens_decoder().values()
                names = sorted({t.content for t in added if t.special and not t.lstrip and not t.single_word
                                and not t.normalized and t.content}, key=len, reverse=True)
            except Exception:  # a backend without the API: every prompt counted whole
                names = []
            self._cuts = re.compile("|".join(map(re.escape, names))) if names else False
        return self._cuts or None

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
                return self.count_rendered(rendered), True
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
