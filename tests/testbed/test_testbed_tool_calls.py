"""The testbed answers requests that offer tools with tool calls, in vLLM's, OpenAI's and Anthropic's shapes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from testbed_helpers import chat, post, running, tiny

from rushhour.testbed.config import ConfigError

TOOLS = [{"type": "function", "function": {"name": "run_command", "description": "Run a command.",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]
ANTHROPIC_TOOLS = [{"name": "run_command", "input_schema": TOOLS[0]["function"]["parameters"]}]


def _chunks(events: list[str]) -> list[dict[str, Any]]:
    return [json.loads(e) for e in events if e != "[DONE]"]


def test_vllm_streamed_tool_call_shape_and_ledger() -> None:
    async def go() -> None:
        async with running(tiny(profile="vllm", tool_calls={"probability": 1.0})) as r:
            res = await post(r, "/v1/chat/completions", chat(max_tokens=5, stream=True, tools=TOOLS),
                             {"x-request-id": "t1"})
            chunks = _chunks(res.events())
            deltas = [c["choices"][0] for c in chunks if c["choices"]]
            assert deltas[0]["delta"] == {"role": "assistant", "content": ""}
            # vLLM's tool parser: id, type, index and name first (no arguments), content null
            first = deltas[1]["delta"]
            assert first["content"] is None
            call = first["tool_calls"][0]
            assert call["id"].startswith("chatcmpl-tool-") and len(call["id"]) == 30 and call["type"] == "function"
            assert call["function"] == {"name": "run_command"}
            frags = [d["delta"]["tool_calls"][0]["function"]["arguments"] for d in deltas[2:-1]]
            assert len(frags) == 5  # one fragment per output token
            assert json.loads("".join(frags)) == {"command": "word " * 5}
            assert deltas[-1]["finish_reason"] == "tool_calls" and deltas[-1]["delta"] == {}
            assert chunks[-1]["usage"]["completion_tokens"] == 5
            led = r.by_id()["t1"]
            assert led["outcome"] == "served" and led["tool_call"] == call["id"] and led["output_tokens"] == 5

            # the next step answers the call: the ledger names the ids a request's tool messages answer
            body = chat(max_tokens=3, tools=TOOLS)
            body["messages"] += [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call["id"], "type": "function",
                     "function": {"name": "run_command", "arguments": "".join(frags)}}]},
                {"role": "tool", "tool_call_id": call["id"], "content": "ok"},
            ]
            res2 = await post(r, "/v1/chat/completions", body, {"x-request-id": "t2"})
            assert res2.status == 200
            led2 = r.by_id()["t2"]
            assert led2["tool_results"] == [call["id"]]
            # the call's text is part of the prompt (counted, and cached as a prefix like any text)
            assert led2["prompt_tokens"] > led["prompt_tokens"] + len("".join(frags)) // 4

    asyncio.run(go())


def test_no_tools_no_call_and_probability_zero() -> None:
    async def go() -> None:
        async with running(tiny(profile="vllm", tool_calls={"probability": 1.0})) as r:
            res = await post(r, "/v1/chat/completions", chat(max_tokens=3, stream=True), {"x-request-id": "n1"})
            assert "tool_calls" not in res.text and '"finish_reason":"length"' in res.text
        async with running(tiny(profile="vllm")) as r:
            res = await post(r, "/v1/chat/completions", chat(max_tokens=3, stream=True, tools=TOOLS),
                             {"x-request-id": "n2"})
            assert "tool_calls" not in res.text
            assert r.by_id()["n2"]["tool_call"] is None

    asyncio.run(go())


def test_probability_is_a_share_and_deterministic_per_prompt() -> None:
    async def go() -> None:
        async with running(tiny(profile="vllm", tool_calls={"probability": 0.5}, seed=7)) as r:
            calls = []
            for i in range(40):
                res = await post(r, "/v1/chat/completions", chat(f"prompt {i}", max_tokens=2, tools=TOOLS),
                                 {"x-request-id": f"p{i}"})
                calls.append(json.loads(res.text)["choices"][0]["finish_reason"] == "tool_calls")
            assert 8 <= sum(calls) <= 32
            again = await post(r, "/v1/chat/completions", chat("prompt 3", max_tokens=2, tools=TOOLS),
                               {"x-request-id": "again"})
            assert (json.loads(again.text)["choices"][0]["finish_reason"] == "tool_calls") == calls[3]

    asyncio.run(go())


def test_openai_profile_shape_and_non_streamed_body() -> None:
    async def go() -> None:
        async with running(tiny(profile="openai", tool_calls={"probability": 1.0})) as r:
            res = await post(r, "/v1/chat/completions", chat(max_tokens=4, stream=True, tools=TOOLS),
                             {"x-request-id": "o1", "Authorization": "Bearer k"})
            deltas = [c["choices"][0] for c in _chunks(res.events()) if c["choices"]]
            head = deltas[0]["delta"]
            assert head["role"] == "assistant" and head["content"] is None and head["refusal"] is None
            tc = head["tool_calls"][0]
            assert tc["id"].startswith("call_") and len(tc["id"]) == 29
            assert tc["function"] == {"name": "run_command", "arguments": ""}
            assert "content" not in deltas[1]["delta"]
            args = "".join(d["delta"]["tool_calls"][0]["function"]["arguments"] for d in deltas[1:-1])
            assert json.loads(args) == {"command": "word " * 4}
            assert deltas[-1]["finish_reason"] == "tool_calls"
            full = await post(r, "/v1/chat/completions", chat(max_tokens=1, tools=TOOLS),
                              {"x-request-id": "o2", "Authorization": "Bearer k"})
            choice = json.loads(full.text)["choices"][0]
            assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
            fn = choice["message"]["tool_calls"][0]["function"]
            assert json.loads(fn["arguments"]) == {"command": "word "}

    asyncio.run(go())


def test_anthropic_tool_use_blocks() -> None:
    async def go() -> None:
        async with running(tiny(profile="anthropic", tool_calls={"probability": 1.0})) as r:
            body = {"model": "testbed", "max_tokens": 3, "stream": True, "tools": ANTHROPIC_TOOLS,
                    "messages": [{"role": "user", "content": "go"}]}
            res = await post(r, "/v1/messages", body, {"x-request-id": "a1", "x-api-key": "k"})
            events = [json.loads(e) for e in res.events()]
            start = next(e for e in events if e["type"] == "content_block_start")
            block = start["content_block"]
            assert block["type"] == "tool_use" and block["id"].startswith("toolu_01") and len(block["id"]) == 30
            assert block["name"] == "run_command" and block["input"] == {}
            parts = [e["delta"] for e in events if e["type"] == "content_block_delta"]
            assert all(p["type"] == "input_json_delta" for p in parts) and len(parts) == 3
            assert json.loads("".join(p["partial_json"] for p in parts)) == {"command": "word " * 3}
            stop = next(e for e in events if e["type"] == "message_delta")
            assert stop["delta"]["stop_reason"] == "tool_use"
            # the next turn: assistant tool_use, then the user's tool_result
            body2 = {"model": "testbed", "max_tokens": 2, "tools": ANTHROPIC_TOOLS, "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": block["id"], "name": "run_command",
                                                   "input": {"command": "word word word "}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"], "content": "ok"}]},
            ]}
            res2 = await post(r, "/v1/messages", body2, {"x-request-id": "a2", "x-api-key": "k"})
            msg = json.loads(res2.text)
            assert msg["stop_reason"] == "tool_use" and msg["content"][0]["type"] == "tool_use"
            assert r.by_id()["a2"]["tool_results"] == [block["id"]]

    asyncio.run(go())


def test_request_log_keeps_every_body(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"

    async def go() -> None:
        async with running(tiny(profile="vllm", request_log=str(log))) as r:
            await post(r, "/v1/chat/completions", chat("first"), {"x-request-id": "r1"})
            await post(r, "/v1/chat/completions", chat("second"), {"x-request-id": "r2"})

    asyncio.run(go())
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["request_id"] for x in lines] == ["r1", "r2"]
    assert lines[1]["body"]["messages"][0]["content"] == "second"


def test_bad_probability_is_named() -> None:
    with pytest.raises(ConfigError, match=r"tool_calls\.probability"):
        tiny(tool_calls={"probability": 1.5})
