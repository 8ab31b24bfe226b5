"""Which requests the testbed answers with a tool call, and which call: a pure function of the prompt.

A model only calls a tool it was offered, so only a request with a non-empty ``tools`` list can get a
call. The decision hashes the seed and the prompt's bytes, so the same prompt gets the same answer
(as a model at temperature 0 would) and a run is reproducible; the call's id comes from the request id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

# Id shapes: vLLM 0.32 `make_tool_call_id()` ("chatcmpl-tool-" + 16 hex, as recorded in
# tests/fixtures/real/vllm-0.32.0), OpenAI "call_" + 24 characters, Anthropic "toolu_01" + 22 characters.
VLLM_ID = "chatcmpl-tool-"
OPENAI_ID = "call_"
ANTHROPIC_ID = "toolu_01"
DEFAULT_KEY = "input"


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """The call one answer carries: its id, the tool's name and the argument its text goes in."""

    id: str
    name: str
    key: str


def tool_names(body: dict[str, Any], endpoint: str) -> list[tuple[str, str]]:
    """(name, first required argument) of every tool the request offers, in order (malformed ones skipped)."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    out: list[tuple[str, str]] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        # OpenAI: {type: function, function: {name, parameters}}; Anthropic: {name, input_schema}
        fn = tool.get("function") if endpoint != "messages" else tool
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            continue
        schema = fn.get("input_schema" if endpoint == "messages" else "parameters")
        out.append((fn["name"], _first_key(schema)))
    return out


def _first_key(schema: Any) -> str:
    if not isinstance(schema, dict):
        return DEFAULT_KEY
    required = schema.get("required")
    if isinstance(required, list) and required and isinstance(required[0], str):
        return required[0]
    props = schema.get("properties")
    if isinstance(props, dict) and props:
        return str(next(iter(props)))
    return DEFAULT_KEY


def plan_call(
    seed: int, probability: float, prompt: bytes, body: dict[str, Any], endpoint: str, rid: str, id_prefix: str
) -> PlannedCall | None:
    """The call this request's answer carries, or None (not offered tools, or the draw said text)."""
    if probability <= 0 or endpoint == "completions":
        return None
    offered = tool_names(body, endpoint)
    if not offered:
        return None
    digest = hashlib.blake2b(prompt, digest_size=16, key=seed.to_bytes(8, "little", signed=True)).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    if draw >= probability:
        return None
    name, key = offered[int.from_bytes(digest[8:], "big") % len(offered)]
    tag = hashlib.blake2b(rid.encode(), digest_size=16).hexdigest()
    if id_prefix == ANTHROPIC_ID:
        ident = ANTHROPIC_ID + tag[:22]
    elif id_prefix == OPENAI_ID:
        ident = OPENAI_ID + tag[:24]
    else:
        ident = VLLM_ID + tag[:16]
    return PlannedCall(ident, name, key)


def received_results(body: dict[str, Any], endpoint: str) -> list[str]:
    """The tool-call ids the request's messages answer (OpenAI ``tool`` messages, Anthropic ``tool_result``)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        return []
    out: list[str] = []
    for m in msgs:
        if not isinstance(m, dict):
            continue
        if endpoint != "messages":
            if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
                out.append(m["tool_call_id"])
            continue
        content = m.get("content")
        if isinstance(content, list):
            out += [b["tool_use_id"] for b in content
                    if isinstance(b, dict) and b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str)]
    return out
