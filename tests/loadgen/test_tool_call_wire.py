"""Tool calls assembled from streamed answers (fast and general SSE paths, any read boundary) and sent back."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from rushhour.loadgen.engine.wire.dialects import build_body
from rushhour.loadgen.engine.wire.stream import ANTHROPIC, OPENAI_CHAT, StreamInterpreter, interpret_body
from rushhour.loadgen.engine.wire.toolcalls import ToolCallCollector
from rushhour.loadgen.prompts import Conversation, ToolCall
from rushhour.testbed.toolcalls import PlannedCall
from rushhour.testbed.wire import Wire

CALL = PlannedCall("chatcmpl-tool-abc", "run_command", "command")


def _stream(endpoint: str, echo_tier: bool, tokens: int) -> bytes:
    wire = Wire(endpoint, "rid-1", "m", True, None, echo_tier, CALL)
    return wire.head(10, 0) + wire.tokens(0, tokens, tokens) + wire.tail(10, tokens, 0)


def _feed(dialect: str, data: bytes, cuts: list[int], crlf: bool = False) -> StreamInterpreter:
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    interp = StreamInterpreter(dialect)
    interp.tools = ToolCallCollector()
    last = 0
    for i, cut in enumerate([*sorted(cuts), len(data)]):
        interp.feed(data[last:cut], 1000 + i)
        last = cut
    return interp


@pytest.mark.parametrize("echo_tier", [False, True], ids=["vllm", "openai"])
@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_openai_stream_call_at_any_boundary(echo_tier: bool, crlf: bool) -> None:
    data = _stream("chat", echo_tier, 7)
    rng = random.Random(3)
    for _ in range(20):
        interp = _feed(OPENAI_CHAT, data, rng.sample(range(1, len(data)), rng.randint(0, 12)), crlf)
        assert interp.tools is not None
        calls = interp.tools.calls()
        assert calls == [ToolCall(CALL.id, "run_command", '{"command": "' + "word " * 7 + '"}')]
        assert interp.complete and interp.output_tokens == 7
        assert interp.tokens == 7  # every argument fragment is one output token, the name chunk none


def test_anthropic_stream_tool_use_at_any_boundary() -> None:
    call = PlannedCall("toolu_01abc", "read_file", "path")
    wire = Wire("messages", "rid-2", "m", False, None, False, call)
    data = wire.head(10, 0) + wire.tokens(0, 4, 4) + wire.tail(10, 4, 0)
    rng = random.Random(4)
    for crlf in (False, True):
        for _ in range(20):
            interp = _feed(ANTHROPIC, data, rng.sample(range(1, len(data)), rng.randint(0, 10)), crlf)
            assert interp.tools is not None
            assert interp.tools.calls() == [ToolCall("toolu_01abc", "read_file", '{"path": "' + "word " * 4 + '"}')]
            assert interp.complete and interp.tokens == 4


def test_parallel_calls_and_text_streams_collect_nothing_extra() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": ""}},
            {"index": 1, "id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"x":1}'}}]}}]},
    ]
    data = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    interp = _feed(OPENAI_CHAT, data, [])
    assert interp.tools is not None
    assert interp.tools.calls() == [ToolCall("a", "f", '{"x":1}'), ToolCall("b", "g", "{}")]
    text = Wire("chat", "r", "m", True, None, False)
    plain = _feed(OPENAI_CHAT, text.head(1, 0) + text.tokens(0, 3, 3) + text.tail(1, 3, 0), [])
    assert plain.tools is not None and plain.tools.calls() == [] and plain.tokens == 3


def test_whole_bodies() -> None:
    for endpoint, dialect in (("chat", OPENAI_CHAT), ("messages", ANTHROPIC)):
        body = Wire(endpoint, "r", "m", True, None, False, CALL).body(5, 3, 0)
        facts = interpret_body(dialect, body)
        (call,) = facts["tool_calls"]
        assert call.id == CALL.id and call.name == "run_command"
        assert json.loads(call.arguments) == {"command": "word " * 3}


def test_only_whole_calls_are_complete() -> None:
    assert ToolCall("a", "f", '{"x": "y"}').complete and ToolCall("a", "f", "").complete
    assert ToolCall("a", "f", "2721000.0").complete  # what real vLLM's random model called with (a JSON number)
    assert not ToolCall("a", "f", '{"x": "wor').complete  # cut by max_tokens


def test_bodies_send_the_call_back_byte_for_byte() -> None:
    call = ToolCall("call_1", "run_command", '{"command": "ls  -la"}')
    conv = Conversation("sys")
    conv.append("user", "task")
    step1 = conv.with_user("go")
    conv.append("user", "go")
    conv.append_call(call)
    conv.append_result(call, "out")
    step2 = conv.with_user("next")
    assert step1.calls == {}  # the earlier copy is not changed by later appends
    _, b1 = build_body(OPENAI_CHAT, "m", step1, 8, True, tools=[{"type": "function", "function": {"name": "x"}}])
    _, b2 = build_body(OPENAI_CHAT, "m", step2, 8, True, tools=[{"type": "function", "function": {"name": "x"}}])
    m1, m2 = orjson.loads(b1)["messages"], orjson.loads(b2)["messages"]
    assert m2[: len(m1)] == m1
    fn = {"name": "run_command", "arguments": '{"command": "ls  -la"}'}
    assert m2[len(m1)] == {"role": "assistant", "content": None,
                           "tool_calls": [{"id": "call_1", "type": "function", "function": fn}]}
    assert m2[len(m1) + 1] == {"role": "tool", "tool_call_id": "call_1", "content": "out"}
    assert b'"arguments":"{\\"command\\": \\"ls  -la\\"}"' in b2  # not re-serialised: the streamed bytes
    _, a1 = build_body(ANTHROPIC, "m", step1, 8, True, tools=[{"type": "function", "function": {"name": "x"}}])
    _, a2 = build_body(ANTHROPIC, "m", step2, 8, True, tools=[{"type": "function", "function": {"name": "x"}}])
    n1, n2 = orjson.loads(a1)["messages"], orjson.loads(a2)["messages"]
    assert n2[: len(n1)] == n1
    assert n2[1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_1", "name": "run_command", "input": {"command": "ls  -la"}}]}
    assert n2[2]["content"][0] == {"type": "tool_result", "tool_use_id": "call_1", "content": "out"}
    # the flat (completions) prompt and the byte estimate include the call
    assert 'run_command({"command": "ls  -la"})' in step2.flat()
    assert step2.bytes == len(step2.flat()) - (len(step2.messages))  # newlines are not counted


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "vllm-0.32.0"


def _real(case: str) -> dict[str, Any]:
    return dict(json.loads((REAL / f"{case}.json").read_text()))


def _shape(obj: Any) -> Any:
    """Keys in order (and the shape below them), values left out: what a client's parser depends on."""
    if isinstance(obj, dict):
        return [(k, _shape(v)) for k, v in obj.items()]
    if isinstance(obj, list):
        return [_shape(v) for v in obj]
    return type(obj).__name__


def test_real_vllm_tool_call_stream_is_assembled_and_the_testbed_matches_its_shape() -> None:
    fixture = _real("vllm-200-stream-tool-call")
    data = fixture["body"].encode()
    for cuts in ([], list(range(1, len(data), 97))):
        interp = _feed(OPENAI_CHAT, data, cuts)
        assert interp.tools is not None
        (call,) = interp.tools.calls()
        assert call.id.startswith("chatcmpl-tool-") and len(call.id) == 30 and call.name == "run_command"
        assert call.arguments and interp.complete and interp.output_tokens is not None
    chunks = [json.loads(e[6:]) for e in fixture["body"].split("\n\n") if e.startswith("data: {")]
    real = [c["choices"][0] for c in chunks if c["choices"]]
    name_real = next(c["delta"] for c in real if "tool_calls" in c["delta"])
    args_real = next(c["delta"] for c in real if "arguments" in json.dumps(c["delta"]))
    finish_real = real[-1]
    ours = Wire("chat", "rid", "tiny", True, None, False, PlannedCall(call.id, "run_command", "command"))
    ours_chunks = [json.loads(e[6:]) for e in (ours.head(12, 0) + ours.tokens(0, 3, 3) + ours.tail(12, 3, 0))
                   .decode().split("\n\n") if e.startswith("data: {")]
    mine = [c["choices"][0] for c in ours_chunks if c["choices"]]
    # {content: null, tool_calls: [{id, type, index, function: {name}}]}, then […[{index, function: {arguments}}]]
    assert _shape(mine[1]["delta"]) == _shape(name_real)
    assert _shape(mine[2]["delta"]) == _shape(args_real)
    assert mine[-1]["delta"] == finish_real["delta"] == {} and mine[-1]["finish_reason"] == "tool_calls"
    assert finish_real["finish_reason"] == "tool_calls"
    assert ours.call is not None and len(ours.call.id) == len(call.id)


def test_real_vllm_tool_call_body() -> None:
    fixture = _real("vllm-200-tool-call")
    facts = interpret_body(OPENAI_CHAT, fixture["body"].encode())
    (call,) = facts["tool_calls"]
    assert call.name == "run_command" and call.id.startswith("chatcmpl-tool-") and call.arguments


def test_real_vllm_anthropic_tool_use_stream() -> None:
    fixture = _real("vllm-200-stream-messages-tool-call")
    assert fixture["endpoint"] == "/v1/messages"
    data = fixture["body"].encode()
    for cuts in ([], list(range(1, len(data), 53))):
        interp = _feed(ANTHROPIC, data, cuts)
        assert interp.tools is not None
        (call,) = interp.tools.calls()
        assert call.name == "run_command" and call.id and call.arguments and call.complete
        assert interp.complete
    events = [json.loads(e.split("data: ", 1)[1]) for e in fixture["body"].split("\n\n") if "data: " in e]
    start = next(e for e in events if e["type"] == "content_block_start")["content_block"]
    ours = Wire("messages", "rid", "tiny", False, None, False, PlannedCall("toolu_01x", "run_command", "command"))
    mine = [json.loads(e.split("data: ", 1)[1]) for e in (ours.head(12, 0) + ours.tokens(0, 2, 2) + ours.tail(12, 2, 0))
            .decode().split("\n\n") if "data: " in e]
    my_start = next(e for e in mine if e["type"] == "content_block_start")["content_block"]
    assert list(my_start) == list(start) == ["type", "id", "name", "input"]
    assert my_start["input"] == start["input"] == {}
    delta = next(e for e in events if e["type"] == "content_block_delta")
    my_delta = next(e for e in mine if e["type"] == "content_block_delta")
    assert set(my_delta) == set(delta) and list(my_delta["delta"]) == list(delta["delta"]) == ["type", "partial_json"]
    stop = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert next(e for e in mine if e["type"] == "message_delta")["delta"] == stop == {"stop_reason": "tool_use",
                                                                                        "stop_sequence": None}


@pytest.mark.parametrize(("case", "dialect", "finished", "stopped"), [
    ("vllm-200-stream-tool-call", OPENAI_CHAT, '"finish_reason":"tool_calls"', '"finish_reason":"length"'),
    ("vllm-200-stream-messages-tool-call", ANTHROPIC, '"stop_reason":"tool_use"', '"stop_reason":"max_tokens"'),
])
def test_a_call_the_token_limit_cut_is_never_complete(case: str, dialect: str, finished: str, stopped: str) -> None:
    """Real vLLM's answers, ended at max_tokens instead (the only change): the call being written is cut, even
    when its arguments still parse (a cut number does: ``30398.0E2162`` was replayed as a whole call)."""
    fixture = _real(case)
    assert fixture["body"].count(finished) == 1
    cut = fixture["body"].replace(finished, stopped).encode()
    for cuts in ([], list(range(1, len(cut), 61))):
        whole = _feed(dialect, fixture["body"].encode(), cuts)
        ended = _feed(dialect, cut, cuts)
        assert whole.tools is not None and ended.tools is not None
        (call,) = whole.tools.calls()
        (cut_call,) = ended.tools.calls()
        assert call.complete and not call.cut
        assert cut_call.arguments == call.arguments and cut_call.cut and not cut_call.complete


def test_a_whole_answer_at_the_token_limit_marks_its_last_call_cut() -> None:
    body = _real("vllm-200-tool-call")["body"]
    assert '"finish_reason":"tool_calls"' in body
    (call,) = interpret_body(OPENAI_CHAT, body.encode())["tool_calls"]
    (cut,) = interpret_body(OPENAI_CHAT, body.replace('"finish_reason":"tool_calls"',
                                                      '"finish_reason":"length"').encode())["tool_calls"]
    assert call.complete and cut.cut and not cut.complete
    two = {"content": [{"type": "tool_use", "id": "a", "name": "f", "input": {"x": 1}},
                       {"type": "tool_use", "id": "b", "name": "g", "input": {}}], "stop_reason": "max_tokens"}
    first, last = interpret_body(ANTHROPIC, orjson.dumps(two))["tool_calls"]
    assert first.complete and not last.complete  # only the call being written when the limit came
