"""Interpret an SSE response per dialect and time it as bytes arrive (pure: no sockets)."""

from __future__ import annotations

import re
from typing import Any

import orjson

from rushhour.loadgen.engine.wire.http import ResponseTooLarge
from rushhour.loadgen.engine.wire.sse import EVENT_TOO_LARGE, MAX_EVENT_BYTES, RESCAN_BYTES, SSESplitter
from rushhour.loadgen.engine.wire.toolcalls import OPENAI_CUT, ToolCallCollector, body_calls
from rushhour.records.record import error_summary, short_text
from rushhour.stacks.timing import from_metrics

OPENAI_CHAT = "openai-chat"
OPENAI_COMPLETIONS = "openai-completions"
ANTHROPIC = "anthropic-messages"

# Content deltas are found without decoding JSON: the key followed by a non-empty string.
# (Inside generated text a quote is escaped, so ``content\\":`` never matches ``"content"\s*:``.)
# A streamed tool call's ``arguments`` fragments are output tokens too (agents send ``tools``).
_CHAT_DELTA = re.compile(rb'"(?:content|reasoning_content|reasoning|arguments)"\s*:\s*"(?!")')
_TEXT_DELTA = re.compile(rb'"text"\s*:\s*"(?!")')
_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_ERROR = re.compile(rb'"error"\s*:')
_TIER = re.compile(rb'"service_tier"\s*:\s*"([^"]{1,40})"')
_TYPE = re.compile(rb'"type"\s*:\s*"([a-z_]+)"')
# The compact form of the content key (what servers send): found with ``bytes.find``; a miss, or an
# empty string after it, falls back to the regular expression (spaces, reasoning fields).
_CHAT_KEY = b'"content":"'
_TEXT_KEY = b'"text":"'
_DELTA_EVENT = b"event: content_block_delta\ndata: "
_DELTA_EVENT_LEN = len(_DELTA_EVENT)
HEAD_BYTES = 512  # the start of a stream body kept for the record when it turns out not to be SSE


class StreamInterpreter:
    """Feeds body bytes of a streamed response; keeps the timing and outcome facts of the stream."""

    __slots__ = (
        "_delta",
        "_itl_sum",
        "_key",
        "_sse",
        "cached_tokens",
        "complete",
        "dialect",
        "events",
        "first_token_ns",
        "head",
        "in_band_error",
        "itl_max_ns",
        "last_token_ns",
        "malformed_text",
        "output_tokens",
        "prompt_tokens",
        "reason",
        "service_tier",
        "timing",
        "token_ns",
        "tokens",
        "tools",
        "unparsable",
    )

    def __init__(self, dialect: str, record_token_times: bool = False) -> None:
        self.dialect = dialect
        self._sse = SSESplitter()
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.tokens = 0
        self._itl_sum = 0
        self.itl_max_ns: int | None = None
        self.token_ns: list[int] | None = [] if record_token_times else None
        self.complete = False
        self.in_band_error: str | None = None
        self.reason: str | None = None
        self.prompt_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.service_tier: str | None = None
        self.timing: dict[str, float] = {}  # the server's own timing (a vLLM ``metrics`` object), as record fields
        self.events = 0
        self.unparsable = 0  # data payloads that were not JSON (malformed SSE)
        self.malformed_text: str | None = None  # the first of them, short
        self.head = bytearray()  # the first HEAD_BYTES of the body (the client may share its own)
        self.tools: ToolCallCollector | None = None  # set when the request offered tools: calls are assembled
        completions = dialect == OPENAI_COMPLETIONS
        self._key = _TEXT_KEY if completions else _CHAT_KEY
        self._delta = _TEXT_DELTA if completions else _CHAT_DELTA

    # ------------------------------------------------------------------ feeding

    def feed(self, chunk: bytes, now_ns: int) -> None:
        """Body bytes that arrived at ``now_ns``.

        The hot path is one loop over the blank-line-separated events in the buffer. An OpenAI
        ``data: {…}`` chunk costs no slice, no call and no JSON: byte searches inside the buffer
        decide "a token" (the content key followed by a non-empty string), "maybe usage or an
        error" (only then is it decoded) and ``service_tier``; an Anthropic ``content_block_delta``
        is a token by its name. Everything else (CR/CRLF framing, comments, multi-line fields,
        non-objects, ``[DONE]``, other named events) goes through ``SSESplitter`` and ``_event``,
        the general path, which is also the reference the fast path is tested against. Tokens of
        one read share its arrival time, so they are counted once per read, as running numbers.
        """
        if not self.events and len(self.head) < HEAD_BYTES:  # names an HTML page or garbage later
            self.head += chunk[: HEAD_BYTES - len(self.head)]
        sse = self._sse
        if sse._cr or b"\r" in chunk:  # CR / CRLF framing: the general splitter folds it
            for name, data in sse.feed(chunk):
                self.events += 1
                self._event(name, data, now_ns)
            return
        pending = sse._buf
        if not pending:
            buf = chunk
        elif len(pending) < RESCAN_BYTES:
            buf = bytes(pending) + chunk  # an event split across reads (common): re-scanning its start is cheap
        elif sse.absorb(chunk):
            return  # a long event goes on: appended in place, only the new bytes searched
        else:
            buf = bytes(pending) + chunk
        find = buf.find
        startswith = buf.startswith
        openai = self.dialect != ANTHROPIC
        key = self._key
        klen = len(key)
        tools = self.tools
        start = 0
        events = 0
        tokens = 0
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                break
            s = start
            if startswith(b"data: ", s) and nl + 1 < len(buf) and buf[nl + 1] == 10:  # a one-line data event
                end = nl
                start = end + 2
                s += 6
                events += 1
                if not (openai and s < end and buf[s] == 123 and buf[end - 1] == 125):  # not {…}
                    self._event(None, buf[s:end], now_ns)
                    continue
                k = find(key, s, end)
                if (k >= 0 and buf[k + klen] != 34) or self._delta.search(buf, s, end) is not None:
                    tokens += 1
                if tools is not None and (find(b'"tool_calls"', s, end) >= 0 or find(OPENAI_CUT, s, end) >= 0):
                    tools.openai_chunk(buf[s:end])
                u = find(b'"usage"', s, end)
                if u >= 0 and buf[u + 7 : u + 9] == b":n" and find(b'"usage"', u + 7, end) < 0:
                    u = -1  # vLLM's ``"usage":null`` on every chunk (the only usage key): no regex per event
                e = find(b'"error"', s, end)
                if (u >= 0 and _USAGE.search(buf, u, end) is not None) or (
                    e >= 0 and _ERROR.search(buf, e, end) is not None
                ):
                    self._openai_object(buf[s:end])  # usage chunk or an error: worth a full decode
                elif self.service_tier is None and find(b'"service_tier"', s, end) >= 0:
                    match = _TIER.search(buf, s, end)
                    if match:
                        self.service_tier = match.group(1).decode("utf-8", "replace")
                continue
            end = find(b"\n\n", nl)
            if end < 0:
                break
            start = end + 2
            if not openai and startswith(_DELTA_EVENT, s) and find(b"\n", s + _DELTA_EVENT_LEN, end) < 0:
                events += 1
                tokens += 1
                if tools is not None:
                    tools.anthropic_event(b"content_block_delta", buf[s + _DELTA_EVENT_LEN : end])
            else:
                event = sse._parse_block(buf[s:end])
                if event is not None:
                    events += 1
                    self._event(event[0], event[1], now_ns)
        sse._buf = buf[start:] if start else buf
        self.events += events
        if tokens:
            self._tokens_at(tokens, now_ns)
        if len(sse._buf) > MAX_EVENT_BYTES:
            raise ResponseTooLarge(EVENT_TOO_LARGE)

    def _event(self, name: bytes | None, data: bytes, now_ns: int) -> None:
        """One complete event (the general path)."""
        if self.dialect == ANTHROPIC:
            self._anthropic(name, data, now_ns)
        else:
            self._openai(name, data, now_ns)

    @property
    def malformed(self) -> int:
        return self.unparsable + self._sse.malformed

    @property
    def pending(self) -> bytes:
        return self._sse.pending

    @property
    def itl_mean_ns(self) -> int | None:
        if self.tokens < 2:
            return None
        return self._itl_sum // (self.tokens - 1)

    # ------------------------------------------------------------------ helpers

    def _token(self, now_ns: int) -> None:
        self._tokens_at(1, now_ns)

    def _tokens_at(self, n: int, now_ns: int) -> None:
        """``n`` tokens that arrived at ``now_ns``: as ``n`` single tokens, without a loop."""
        if self.token_ns is not None:
            self.token_ns.extend([now_ns] * n)
        if self.first_token_ns is None:
            self.first_token_ns = self.last_token_ns = now_ns
            self.tokens += 1
            n -= 1
            if not n:
                return
        last = self.last_token_ns
        gap = now_ns - last if last else 0  # the other n - 1 gaps are 0
        self._itl_sum += gap
        if self.itl_max_ns is None or gap > self.itl_max_ns:
            self.itl_max_ns = gap
        self.last_token_ns = now_ns
        self.tokens += n

    def _decode(self, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            self.unparsable += 1
            if self.malformed_text is None:
                self.malformed_text = short_text(b"malformed SSE event: " + data[:200])
            return None

    def _error(self, obj: Any) -> None:
        reason, text = error_summary(obj)
        if self.in_band_error is None:
            self.in_band_error = text or "error"
        if reason and self.reason is None:
            self.reason = reason

    # ------------------------------------------------------------------ OpenAI (chat, completions)

    def _openai(self, name: bytes | None, data: bytes, now_ns: int) -> None:
        if data == b"[DONE]":
            self.complete = True
            return
        if name == b"error":  # Responses-style ``event: error`` inside a 200 stream
            self._error(self._decode(data))
            return
        if data[:1] != b"{" or data[-1:] != b"}":
            self._decode(data)  # not a JSON object: decoding it records it as malformed
            return
        if self._delta.search(data) is not None:
            self._token(now_ns)
        if self.tools is not None and (b'"tool_calls"' in data or OPENAI_CUT in data):
            self.tools.openai_chunk(data)
        if _USAGE.search(data) is None and _ERROR.search(data) is None:
            if self.service_tier is None and b"service_tier" in data:
                match = _TIER.search(data)
                if match:
                    self.service_tier = match.group(1).decode("utf-8", "replace")
            return
        self._openai_object(data)

    def _openai_object(self, data: bytes) -> None:
        """A JSON object chunk that may hold usage or an error: decoded."""
        obj = self._decode(data)
        if not isinstance(obj, dict):
            return
        if obj.get("error") is not None or obj.get("object") == "error":
            self._error(obj)
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._usage_openai(usage)
            # vLLM's per-request metrics ride on the final usage chunk (chat_completion/serving.py)
            self.timing.update(from_metrics(obj.get("metrics")))
        tier = obj.get("service_tier")
        if isinstance(tier, str):
            self.service_tier = tier

    def _usage_openai(self, usage: dict[str, Any]) -> None:
        if isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            self.output_tokens = usage["completion_tokens"]
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            self.cached_tokens = details["cached_tokens"]

    # ------------------------------------------------------------------ Anthropic Messages

    def _anthropic(self, name: bytes | None, data: bytes, now_ns: int) -> None:
        if name is None:  # some proxies drop ``event:`` lines; the type is in the data too
            match = _TYPE.search(data)
            name = match.group(1) if match else b""
        if name == b"content_block_delta":
            self._token(now_ns)
            if self.tools is not None:
                self.tools.anthropic_event(name, data)
            return
        if name in (b"content_block_start", b"message_delta") and self.tools is not None:
            self.tools.anthropic_event(name, data)
            if name == b"content_block_start":
                return
        if name == b"ping" or name in (b"content_block_start", b"content_block_stop"):
            return
        if name == b"message_stop":
            self.complete = True
            return
        obj = self._decode(data)
        if not isinstance(obj, dict):
            return
        if name == b"error" or obj.get("type") == "error":
            self._error(obj)
            return
        if name == b"message_start":
            message = obj.get("message") or {}
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                self._usage_anthropic(usage)
        elif name == b"message_delta":
            usage = obj.get("usage")
            if isinstance(usage, dict):
                self._usage_anthropic(usage)

    def _usage_anthropic(self, usage: dict[str, Any]) -> None:
        if isinstance(usage.get("input_tokens"), int):
            cache_read = usage.get("cache_read_input_tokens")
            cache_new = usage.get("cache_creation_input_tokens")
            total = usage["input_tokens"]
            total += cache_read if isinstance(cache_read, int) else 0
            total += cache_new if isinstance(cache_new, int) else 0
            self.prompt_tokens = total
            if isinstance(cache_read, int):
                self.cached_tokens = cache_read
        if isinstance(usage.get("output_tokens"), int):
            self.output_tokens = usage["output_tokens"]
        tier = usage.get("service_tier")
        if isinstance(tier, str):
            self.service_tier = tier


def interpret_body(dialect: str, body: bytes) -> dict[str, Any]:
    """Facts from a complete non-streamed JSON response (usage, tier, whether it had output)."""
    facts: dict[str, Any] = {"has_output": False}
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        facts["error"] = short_text(b"non-JSON body: " + body[:200])
        return facts
    if not isinstance(obj, dict):
        facts["error"] = short_text(b"unexpected body: " + body[:200])
        return facts
    if obj.get("error") is not None or obj.get("type") == "error":
        facts["reason"], facts["error"] = error_summary(obj)
        return facts
    facts["tool_calls"] = body_calls(dialect == ANTHROPIC, obj)
    facts["timing"] = from_metrics(obj.get("metrics"))  # vLLM --enable-per-request-metrics
    usage_obj = obj.get("usage")
    usage: dict[str, Any] = usage_obj if isinstance(usage_obj, dict) else {}
    if dialect == ANTHROPIC:
        facts["has_output"] = bool(obj.get("content"))
        probe = StreamInterpreter(dialect)
        probe._usage_anthropic(usage)
        facts.update(
            prompt_tokens=probe.prompt_tokens,
            output_tokens=probe.output_tokens,
            cached_tokens=probe.cached_tokens,
            service_tier=probe.service_tier,
        )
    else:
        choices = obj.get("choices") or []
        facts["has_output"] = bool(choices)
        probe = StreamInterpreter(dialect)
        probe._usage_openai(usage)
        facts.update(
            prompt_tokens=probe.prompt_tokens, output_tokens=probe.output_tokens, cached_tokens=probe.cached_tokens
        )
        if isinstance(obj.get("service_tier"), str):
            facts["service_tier"] = obj["service_tier"]
    return facts
