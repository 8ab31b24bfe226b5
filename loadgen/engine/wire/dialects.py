"""Request bodies per dialect: OpenAI chat completions, OpenAI completions, Anthropic Messages."""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.engine.wire.stream import ANTHROPIC, OPENAI_CHAT, OPENAI_COMPLETIONS
from loadgen.prompts import Conversation

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
        messages = [{"role": "system", "content": prompt.system}] if prompt.system else []
        messages += [{"role": role, "content": content} for role, content in prompt.messages]
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
        body["messages"] = _alternating(prompt.messages)
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


def _alternating(messages: list[tuple[str, str]]) -> list[dict[str, str]]:
    """Anthropic wants user/assistant turns to alternate: merge neighbours of the same role."""
    out: list[dict[str, str]] = []
    for role, content in messages:
        if out and out[-1]["role"] == role:
            out[-1] = {"role": role, "content": out[-1]["content"] + "\n" + content}
        else:
            out.append({"role": role, "content": content})
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": "."})
    return out
