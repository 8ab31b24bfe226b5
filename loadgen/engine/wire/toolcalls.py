"""The tool calls of an answer, assembled from streamed deltas (OpenAI chat, Anthropic Messages) or a whole body.

Only requests that offer tools collect them (the stream interpreter holds a collector then), so the
hot path of every other stream is unchanged. Arguments are kept exactly as streamed: the next step
sends them back byte for byte.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from rushhour.loadgen.prompts import ToolCall

# An answer that ended at its token limit: the call being written then (the last one) was cut. Chunks that
# carry these are the only ones besides tool-call deltas the collector is shown (every vLLM chunk holds
# ``"finish_reason":null``, so looking for the key alone would decode every chunk).
OPENAI_CUT = b'"length"'  # finish_reason
ANTHROPIC_CUT = b'"max_tokens"'  # message_delta's stop_reason


class ToolCallCollector:
    """Tool calls by index: id and name from their first delta, arguments as the fragments' concatenation."""

    __slots__ = ("_calls", "cut")

    def __init__(self) -> None:
        self._calls: dict[int, list[Any]] = {}  # index -> [id, name, [fragments]]
        self.cut = False  # the answer ended at max_tokens (finish_reason length / stop_reason max_tokens)

    def _slot(self, index: Any) -> list[Any]:
        key = index if isinstance(index, int) else 0
        slot = self._calls.get(key)
        if slot is None:
            slot = self._calls[key] = ["", "", []]
        return slot

    def openai_chunk(self, data: bytes) -> None:
        """A chat chunk whose delta has ``tool_calls`` (each entry: index, and id/name/arguments when present)."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return  # the interpreter counts malformed events itself
        choices = obj.get("choices") if isinstance(obj, dict) else None
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict) and choice.get("finish_reason") == "length":
                self.cut = True
            delta = choice.get("delta") if isinstance(choice, dict) else None
            calls = delta.get("tool_calls") if isinstance(delta, dict) else None
            for tc in calls if isinstance(calls, list) else []:
                if not isinstance(tc, dict):
                    continue
                slot = self._slot(tc.get("index"))
                if isinstance(tc.get("id"), str) and tc["id"]:
                    slot[0] = tc["id"]
                fn = tc.get("function")
                if isinstance(fn, dict):
                    if isinstance(fn.get("name"), str) and fn["name"]:
                        slot[1] = fn["name"]
                    if isinstance(fn.get("arguments"), str):
                        slot[2].append(fn["arguments"])

    def anthropic_event(self, name: bytes | None, data: bytes) -> None:
        """``content_block_start`` of a ``tool_use`` block, an ``input_json_delta`` of one, or the
        ``message_delta`` that says the answer stopped at max_tokens."""
        if name == b"message_delta":
            if ANTHROPIC_CUT in data:
                try:
                    obj = orjson.loads(data)
                except orjson.JSONDecodeError:
                    return
                delta = obj.get("delta") if isinstance(obj, dict) else None
                if isinstance(delta, dict) and delta.get("stop_reason") == "max_tokens":
                    self.cut = True
            return
        if b"tool_use" not in data and b"input_json_delta" not in data:
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        kind = obj.get("type")
        if kind == "content_block_start":
            block = obj.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                slot = self._slot(obj.get("index"))
                slot[0] = str(block.get("id") or "")
                slot[1] = str(block.get("name") or "")
                start = block.get("input")
                if isinstance(start, dict) and start:  # a whole input up front (no deltas will follow)
                    slot[2].append(orjson.dumps(start).decode())
        elif kind == "content_block_delta":
            delta = obj.get("delta")
            index = obj.get("index")
            if isinstance(delta, dict) and delta.get("type") == "input_json_delta" and index in self._calls:
                part = delta.get("partial_json")
                if isinstance(part, str):
                    self._calls[index][2].append(part)

    def calls(self) -> list[ToolCall]:
        """The complete picture so far, in index order (calls without a name are not calls); when the answer
        ended at max_tokens, the last call is marked cut."""
        out = [ToolCall(c[0], c[1], "".join(c[2])) for _, c in sorted(self._calls.items()) if c[1]]
        if self.cut and out:
            out[-1] = replace(out[-1], cut=True)
        return out


def body_calls(dialect_is_anthropic: bool, obj: dict[str, Any]) -> list[ToolCall]:
    """The tool calls of a whole (non-streamed) answer; the last one marked cut when it ended at max_tokens."""
    out: list[ToolCall] = []
    if dialect_is_anthropic:
        content = obj.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name"):
                text = orjson.dumps(block.get("input") or {}).decode()
                out.append(ToolCall(str(block.get("id") or ""), str(block["name"]), text))
        if out and obj.get("stop_reason") == "max_tokens":
            out[-1] = replace(out[-1], cut=True)
        return out
    choices = obj.get("choices")
    for choice in choices[:1] if isinstance(choices, list) else []:
        cut = isinstance(choice, dict) and choice.get("finish_reason") == "length"
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for tc in calls if isinstance(calls, list) else []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict) and fn.get("name"):
                raw = fn.get("arguments")
                text = raw if isinstance(raw, str) else orjson.dumps(raw or {}).decode()
                out.append(ToolCall(str(tc.get("id") or ""), str(fn["name"]), text))
        if cut and out:
            out[-1] = replace(out[-1], cut=True)
    return out
