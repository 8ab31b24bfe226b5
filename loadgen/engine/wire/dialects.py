"""Request bodies per dialect: OpenAI chat completions, OpenAI completions, Anthropic Messages."""

from __future__ import annotations

from typing import Any

import orjson

from rushhour.loadgen.engine.wire.stream import ANTHROPIC, OPENAI_CHAT, OPENAI_COMPLETIONS
from rushhour.loadgen.prompts import TOOL, Conversation, ToolCall

PATHS = {
    OPENAI_CHAT: "/v1/chat/completions",
    OPENAI_COMPLETIONS: "/v1/completions",
    ANTHROPIC: "/v1/messages",
}


def build_body(
    dialect: str,
    model: str,
    prompt: Conversation,
    max_tokens: int,
    stream: bool,
    extra: dict[str, Any] | None = None,
    pin_output: bool = False,
    tools: list[dict[str, Any]] | None = None,
) -> tuple[str, bytes]:
    """(path, JSON body) for one request; ``extra`` holds the tier's body fields (applied last).

    ``pin_output`` asks an OpenAI-dialect server for exactly ``max_tokens`` (vLLM's and SGLang's
    ``min_tokens`` + ``ignore_eos``), so output length is the scenario's, not the model's whim.
    """
    body: dict[str, Any] = {"model": model, "max_tokens": max(1, max_tokens), "stream": stream}
    if pin_output and dialect != ANTHROPIC:
        body["min_tokens"] = max(1, max_tokens)
        body["ignore_eos"] = True
    if dialect == OPENAI_CHAT:
        messages: list[dict[str, Any]] = [{"role": "system", "content": prompt.system}] if prompt.system else []
        calls = prompt.calls
        messages += [
            _openai_message(role, content, calls.get(i)) if calls else {"role": role, "content": content}
            for i, (role, content) in enumerate(prompt.messages)
        ]
        body["messages"] = messages
        if tools:
            body["tools"] = tools
        if stream:
            body["stream_options"] = {"include_usage": True}
    elif dialect == OPENAI_COMPLETIONS:
        body["prompt"] = prompt.flat()
        if stream:
            body["stream_options"] = {"include_usage": True}
    elif dialect == ANTHROPIC:
        if prompt.system:
            body["system"] = prompt.system
        # with tools, content blocks from the first step on, so the history's bytes never change shape
        body["messages"] = _alternating(prompt.messages, prompt.calls if tools or prompt.calls else None)
        if tools:  # Anthropic's shape: name, description, input_schema
            body["tools"] = [_anthropic_tool(t) for t in tools]
    else:
        raise ValueError(f"unknown dialect {dialect!r}")
    if extra:
        body.update(extra)
    return PATHS[dialect], orjson.dumps(body)


def _anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function", tool)
    out = {"name": fn["name"], "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}}
    if fn.get("description"):
        out["description"] = fn["description"]
    return out


def _openai_message(role: str, content: str, call: ToolCall | None) -> dict[str, Any]:
    """An OpenAI chat message; an assistant's tool call as ``tool_calls``, a tool's answer with its call id."""
    if call is None:
        return {"role": role, "content": content}
    if role == TOOL:
        return {"role": TOOL, "tool_call_id": call.id, "content": content}
    fn = {"name": call.name, "arguments": call.arguments}  # the arguments exactly as streamed: same bytes
    calls = [{"id": call.id, "type": "function", "function": fn}]
    return {"role": role, "content": content or None, "tool_calls": calls}


def _anthropic_blocks(role: str, content: str, call: ToolCall | None) -> tuple[str, list[dict[str, Any]]]:
    """(role, content blocks) of one message: tool_use for an assistant's call, a user's tool_result."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    if call is None:
        return role, blocks
    if role == TOOL:
        return "user", [{"type": "tool_result", "tool_use_id": call.id, "content": content}]
    try:
        tool_input = orjson.loads(call.arguments) if call.arguments else {}
    except orjson.JSONDecodeError:
        tool_input = {}  # a cut call's partial JSON: Anthropic wants an object
    return role, [*blocks, {"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input}]


def _alternating(
    messages: list[tuple[str, str]], calls: dict[int, ToolCall] | None = None
) -> list[dict[str, Any]]:
    """Anthropic wants user/assistant turns to alternate: merge neighbours of the same role.

    Without tool calls the content stays a string; with them, messages are lists of content blocks
    (a tool's answer is a user ``tool_result`` block).
    """
    out: list[dict[str, Any]] = []
    if calls is None:
        for role, content in messages:
            if out and out[-1]["role"] == role:
                out[-1] = {"role": role, "content": out[-1]["content"] + "\n" + content}
            else:
                out.append({"role": role, "content": content})
    else:
        for i, (role, content) in enumerate(messages):
            role, blocks = _anthropic_blocks(role, content, calls.get(i))
            if out and out[-1]["role"] == role:
                out[-1] = {"role": role, "content": [*out[-1]["content"], *blocks]}
            else:
                out.append({"role": role, "content": blocks or [{"type": "text", "text": "."}]})
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": "."})
    return out
