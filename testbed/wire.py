"""Response bodies on the wire: OpenAI chat/completions chunks, Anthropic SSE events, JSON bodies."""

from __future__ import annotations

import json
import time
from typing import Any

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
                 service_tier: str | None, echo_tier: bool) -> None:
        self.endpoint = endpoint
        self.rid = rid
        self.model = model
        self.include_usage = include_usage
        self.service_tier = service_tier
        self.echo_tier = echo_tier
        self.created = int(time.time())
        if endpoint == "messages":
            self.id = "msg_" + rid.replace("-", "")[:24]
            tok = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": WORD}}
            self.token = b"event: content_block_delta\ndata: " + _dumps(tok).encode() + b"\n\n"
        else:
            chat = endpoint == "chat"
            self.id = ("chatcmpl-" if chat else "cmpl-") + rid
            self.token = _sse(self._chunk({"delta": {"content": WORD}} if chat else {"text": WORD}))

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
        if self.endpoint == "chat":
            return _sse(self._chunk({"delta": {"role": "assistant", "content": ""}}))
        if self.endpoint == "messages":
            start = {"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": prompt - cached, "cache_read_input_tokens": cached,
                          "cache_creation_input_tokens": 0, "output_tokens": 1,
                          "service_tier": self.service_tier}}}
            block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            return (b"event: message_start\ndata: " + _dumps(start).encode() + b"\n\n"
                    + b"event: content_block_start\ndata: " + _dumps(block).encode() + b"\n\n"
                    + b'event: ping\ndata: {"type":"ping"}\n\n')
        return b""

    def tail(self, prompt: int, output: int, cached: int) -> bytes:
        """Bytes that end a complete stream (finish chunk, usage, end marker)."""
        if self.endpoint == "messages":
            delta = {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                     "usage": {"output_tokens": output}}
            return (b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
                    + b"event: message_delta\ndata: " + _dumps(delta).encode() + b"\n\n"
                    + b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
        chat = self.endpoint == "chat"
        out = _sse(self._chunk({"delta": {}} if chat else {"text": ""}, "length"))
        if self.include_usage:
            d = self._base("chat.completion.chunk" if chat else "text_completion")
            d["choices"] = []
            d["usage"] = self.usage(prompt, output, cached)
            out += _sse(d)
        return out + DONE

    def in_band_error(self, body: bytes) -> bytes:
        """An error after HTTP 200 (SGLang style `data: {"error":…}` then [DONE]; Anthropic `event: error`)."""
        if self.endpoint == "messages":
            return b"event: error\ndata: " + body + b"\n\n"
        return b"data: " + body + b"\n\n" + DONE

    # ---- non-streaming ----------------------------------------------------------------------
    def body(self, prompt: int, output: int, cached: int) -> bytes:
        """Complete non-streaming JSON body."""
        text = WORD * output
        if self.endpoint == "messages":
            return _dumps({"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                           "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens",
                           "stop_sequence": None,
                           "usage": {"input_tokens": prompt - cached, "cache_read_input_tokens": cached,
                                     "cache_creation_input_tokens": 0, "output_tokens": output,
                                     "service_tier": self.service_tier}}).encode()
        chat = self.endpoint == "chat"
        d = self._base("chat.completion" if chat else "text_completion")
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        d["choices"] = [choice]
        d["usage"] = self.usage(prompt, output, cached)
        return _dumps(d).encode()
