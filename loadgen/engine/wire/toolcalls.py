"""The tool calls of an answer, assembled from streamed deltas (OpenAI chat, Anthropic Messages) or a whole body.

Only requests that offer tools collect them (the stream interpreter holds a collector then), so the
hot path of every other stream is unchanged. Arguments are kept exactly as streamed: the next step
sends them back byte for byte.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.prompts import ToolCall


class ToolCallCollector:
    """Tool calls by index: id and name from their first delta, arguments as the fragments' concatenation."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[int, list[Any]] = {}  # index -> [id, name, [fragments]]

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
        """``content_block_start`` of a ``tool_use`` block, or an ``input_json_delta`` of one."""
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
        """The complete picture so far, in index order (calls without a name are not calls)."""
        return [ToolCall(c[0], c[1], "".join(c[2])) for _, c in sorted(self._calls.items()) if c[1]]


def body_calls(dialect_is_anthropic: bool, obj: dict[str, Any]) -> list[ToolCall]:
    """The tool calls of a whole (non-streamed) answer."""
    out: list[ToolCall] = []
    if dialect_is_anthropic:
        content = obj.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name"):
                text = orjson.dumps(block.get("input") or {}).decode()
                out.append(ToolCall(str(block.get("id") or ""), str(block["name"]), text))
        return out
    choices = obj.get("choices")
    for choice in choices[:1] if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for tc in calls if isinstance(calls, list) else []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict) and fn.get("name"):
                raw = fn.get("arguments")
                text = raw if isinstance(raw, str) else orjson.dumps(raw or {}).decode()
                out.append(ToolCall(str(tc.get("id") or ""), str(fn["name"]), text))
    return out
