"""Response bodies on the wire: OpenAI chat/completions chunks, Anthropic SSE events, JSON bodies."""

from __future__ import annotations

import json
import time
from typing import Any

from rushhour.testbed.toolcalls import PlannedCall

WORD = "word "  # every generated token is this text (ignore_eos style fixed output)
DONE = b"data: [DONE]\n\n"


def frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer chunk. The server frames once, when it writes to the transport;
    everything else in this module returns plain SSE bytes (framing twice breaks every real client)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _sse(obj: Any) -> bytes:
    return b"data: " + _dumps(obj).encode() + b"\n\n"


class Wire:
    """Formats one request's stream and final body; per-token bytes are built once."""

    def __init__(self, endpoint: str, rid: str, model: str, include_usage: bool,
                 service_tier: str | None, echo_tier: bool, call: PlannedCall | None = None) -> None:
        self.endpoint = endpoint
        self.rid = rid
        self.model = model
        self.include_usage = include_usage
        self.service_tier = service_tier
        self.echo_tier = echo_tier  # the OpenAI profile: OpenAI's own shapes where they differ from vLLM's
        self.call = call
        self.created = int(time.time())
        if endpoint == "messages":
            self.id = "msg_" + rid.replace("-", "")[:24]
        else:
            self.id = ("chatcmpl-" if endpoint == "chat" else "cmpl-") + rid
        self.token = self._token(WORD)
        # A tool call's arguments are a JSON object {"<key>": "word word … "}: the first token opens it,
        # the last closes it, so the concatenated fragments parse (first/last differ from the rest).
        self.first_token = self.last_token = self.only_token = self.token
        if call is not None:
            opening = "{" + _dumps(call.key) + ": \""
            self.first_token = self._token(opening + WORD)
            self.last_token = self._token(WORD + '"}')
            self.only_token = self._token(opening + WORD + '"}')

    def _token(self, text: str) -> bytes:
        """One token's SSE bytes: text, or a fragment of the tool call's arguments."""
        if self.endpoint == "messages":
            block = ({"type": "input_json_delta", "partial_json": text} if self.call is not None
                     else {"type": "text_delta", "text": text})
            tok = {"type": "content_block_delta", "index": 0, "delta": block}
            return b"event: content_block_delta\ndata: " + _dumps(tok).encode() + b"\n\n"
        if self.endpoint != "chat":
            return _sse(self._chunk({"text": text}))
        if self.call is None:
            return _sse(self._chunk({"delta": {"content": text}}))
        fragment = {"index": 0, "function": {"arguments": text}}
        # vLLM's DeltaMessage(content=None, tool_calls=[…]) dumped with exclude_unset; OpenAI omits content
        delta: dict[str, Any] = {"tool_calls": [fragment]} if self.echo_tier else {"content": None,
                                                                                  "tool_calls": [fragment]}
        return _sse(self._chunk({"delta": delta}))

    def tokens(self, start: int, n: int, total: int) -> bytes:
        """SSE bytes of tokens ``start`` … ``start + n - 1`` of ``total`` (a tool call's first and last differ)."""
        if self.call is None or n <= 0:
            return self.token * n
        parts = []
        for i in range(start, start + n):
            if i == 0:
                parts.append(self.only_token if total == 1 else self.first_token)
            elif i == total - 1:
                parts.append(self.last_token)
            else:
                parts.append(self.token)
        return b"".join(parts)

    def arguments(self, output: int) -> str:
        """The whole arguments text of a complete tool call of ``output`` tokens."""
        assert self.call is not None
        return "{" + _dumps(self.call.key) + ': "' + WORD * output + '"}'

    # ---- OpenAI chunks -----------------------------------------------------------------
    def _base(self, obj: str) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "object": obj, "created": self.created, "model": self.model}
        if self.echo_tier:
            d["service_tier"] = self.service_tier
        return d

    def _chunk(self, choice: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        chat = self.endpoint == "chat"
        d = self._base("chat.completion.chunk" if chat else "text_completion")
        c = {"index": 0, **choice, "logprobs": None, "finish_reason": finish}
        d["choices"] = [c]
        if self.include_usage:
            d["usage"] = None
        return d

    def usage(self, prompt: int, output: int, cached: int) -> dict[str, Any]:
        """OpenAI usage object."""
        return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def head(self, prompt: int, cached: int) -> bytes:
        """Bytes sent just before the first token."""
        call = self.call
        if self.endpoint == "chat":
            if call is not None and self.echo_tier:  # OpenAI: role, id and name in the first chunk
                tc = {"index": 0, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
                return _sse(self._chunk({"delta": {"role": "assistant", "content": None, "tool_calls": [tc],
                                                   "refusal": None}}))
            head = _sse(self._chunk({"delta": {"role": "assistant", "content": ""}}))
            if call is not None:  # vLLM's tool parser: id, type and name first, no arguments yet
                tc = {"id": call.id, "type": "function", "index": 0, "function": {"name": call.name}}
                head += _sse(self._chunk({"delta": {"content": None, "tool_calls": [tc]}}))
            return head
        if self.endpoint == "messages":
            start = {"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": prompt - cached, "cache_read_input_tokens": cached,
                          "cache_creation_input_tokens": 0, "output_tokens": 1,
                          "service_tier": self.service_tier}}}
            block = {"type": "content_block_start", "index": 0,
                     "content_block": ({"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
                                       if call is not None else {"type": "text", "text": ""})}
            return (b"event: message_start\ndata: " + _dumps(start).encode() + b"\n\n"
                    + b"event: content_block_start\ndata: " + _dumps(block).encode() + b"\n\n"
                    + b'event: ping\ndata: {"type":"ping"}\n\n')
        return b""

    def tail(self, prompt: int, output: int, cached: int, metrics: dict[str, float] | None = None) -> bytes:
        """Bytes that end a complete stream (finish chunk, usage, end marker)."""
        if self.endpoint == "messages":
            stop = "tool_use" if self.call is not None else "max_tokens"
            delta = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                     "usage": {"output_tokens": output}}
            return (b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
                    + b"event: message_delta\ndata: " + _dumps(delta).encode() + b"\n\n"
                    + b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
        chat = self.endpoint == "chat"
        finish = "tool_calls" if self.call is not None else "length"
        out = _sse(self._chunk({"delta": {}} if chat else {"text": ""}, finish))
        if self.include_usage:
            d = self._base("chat.completion.chunk" if chat else "text_completion")
            d["choices"] = []
            d["usage"] = self.usage(prompt, output, cached)
            if metrics is not None:
                d["metrics"] = metrics  # vLLM: per-request metrics ride on the final usage chunk
            out += _sse(d)
        return out + DONE

    def in_band_error(self, body: bytes) -> bytes:
        """An error after HTTP 200 (SGLang style `data: {"error":…}` then [DONE]; Anthropic `event: error`)."""
        if self.endpoint == "messages":
            return b"event: error\ndata: " + body + b"\n\n"
        return b"data: " + body + b"\n\n" + DONE

    # ---- non-streaming ----------------------------------------------------------------------
    def body(self, prompt: int, output: int, cached: int, metrics: dict[str, float] | None = None) -> bytes:
        """Complete non-streaming JSON body."""
        text = WORD * output
        call = self.call
        if self.endpoint == "messages":
            block: dict[str, Any] = {"type": "text", "text": text}
            if call is not None:
                block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {call.key: text}}
            return _dumps({"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                           "content": [block], "stop_reason": "tool_use" if call is not None else "max_tokens",
                           "stop_sequence": None,
                           "usage": {"input_tokens": prompt - cached, "cache_read_input_tokens": cached,
                                     "cache_creation_input_tokens": 0, "output_tokens": output,
                                     "service_tier": self.service_tier}}).encode()
        chat = self.endpoint == "chat"
        d = self._base("chat.completion" if chat else "text_completion")
        choice: dict[str, Any] = {"index": 0, "logprobs": None,
                                  "finish_reason": "tool_calls" if call is not None else "length"}
        if chat and call is not None:
            fn = {"name": call.name, "arguments": self.arguments(output)}
            choice["message"] = {"role": "assistant", "content": None,
                                 "tool_calls": [{"id": call.id, "type": "function", "function": fn}]}
        elif chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        d["choices"] = [choice]
        d["usage"] = self.usage(prompt, output, cached)
        if metrics is not None:
            d["metrics"] = metrics
        return _dumps(d).encode()
