"""Agents carry a REAL vLLM's tool calls into their next step (what tests/e2e/test_agents_tool_calls.py proves
against the embedded testbed).

vLLM 0.32 is started with ``--enable-auto-tool-choice --tool-call-parser hermes`` (the FCFS twin, fcfs_vllm, which
takes the tier's priority field and ignores it); the scenario's tier adds
``tool_choice: required``, so structured output makes the random-weight tiny model call the built-in tools
(sometimes several in parallel); the vllm profile pins output, but not on requests that offer tools, so an
answer ends where its call does (pinned, every call was cut: loadgen/tiers.py ``pins_output``). A
recording proxy (tests/real/recording_proxy.py) between rushhour and vLLM keeps every request body and every
streamed answer byte by ``x-request-id``. From vLLM's own SSE (``delta.tool_calls``: id, name, argument
fragments per index; ``finish_reason``) the test knows each answer's calls, and checks the SAME task's next
request: the earlier request's bytes up to its last message start it, then

- a call vLLM finished (finish_reason ``tool_calls``): an assistant message whose only ``tool_calls`` entry
  has call 0's id, name and the concatenation of its argument fragments, then a ``tool`` message answering
  that id (of parallel calls only the first goes back: docs/scenarios.md, ``tools``);
- an answer cut by max_tokens (finish_reason ``length``): the call being written then (the last) is cut and
  never replayed, even when its streamed part parses (a number: the random model's arguments are often
  scalars); rushhour replays the first earlier call whose arguments are whole JSON (``ToolCall.complete``;
  loadgen/flow/agents.py ``_carry``). So a parallel answer cut in its 2nd call carries its 1st; a single cut
  call carries NO call: an assistant TEXT message, then the tool result as a USER message, no ``tool_calls``
  and no ``tool`` message.

The audit's agent figures (summary tiers[].agents) must equal what the proxy saw (cut calls count as
answers that called a tool). The figures are printed; the recorded wire is left in the test's tmp_path.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rushhour.records.record import read_shard, shard_paths
from rushhour.scenarios.tools import BUILTIN_TOOLS

from .helpers import SCENARIOS, run_rushhour, tiers
from .recording_proxy import Exchange, RecordingProxy

SCENARIO = SCENARIOS / "vllm-agent-tool-calls.yaml"
PERSONA, TIER = "coders", "agents"
APPEND_TOKENS = 16  # the scenario's append_tokens: the size of each tool result
TOOL_NAMES = {t["function"]["name"] for t in BUILTIN_TOOLS}
SSE_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass
class Call:
    """One tool call of a streamed answer: id and name from its first delta, the argument fragments joined."""

    id: str = ""
    name: str = ""
    arguments: str = ""

    @property
    def whole_json(self) -> bool:
        """The arguments parse (rushhour's ToolCall.complete: empty arguments count as ``{}``)."""
        try:
            json.loads(self.arguments or "{}")
        except ValueError:
            return False
        return True


@dataclass
class Answer:
    """What vLLM streamed back for one request, read from the proxy's bytes (independent of rushhour's parser)."""

    status: int
    done: bool = False  # data: [DONE] arrived
    errors: list[Any] = field(default_factory=list)  # error events inside the stream
    finish_reason: str | None = None
    calls: list[Call] = field(default_factory=list)  # by index, as streamed

    @property
    def served(self) -> bool:
        return self.status == 200 and self.done and not self.errors

    @property
    def name(self) -> str:
        """The tool the answer called first ("" = none): what rushhour records as the request's tool_call."""
        return next((c.name for c in self.calls if c.name), "")

    @property
    def replayable(self) -> Call | None:
        """The call the next step must carry: the first named one whose arguments are whole JSON, never the
        one being written when max_tokens came (the last call of an answer ended by ``length``)."""
        finished = self.calls[:-1] if self.finish_reason == "length" else self.calls
        return next((c for c in finished if c.name and c.whole_json), None)


def parse_answer(exchange: Exchange) -> Answer:
    answer = Answer(exchange.status)
    if exchange.status != 200:
        return answer
    calls: dict[int, Call] = {}
    fragments: dict[int, list[str]] = defaultdict(list)
    text = exchange.response_body.decode()
    if not exchange.response_headers.get("content-type", "").startswith("text/event-stream"):
        raise AssertionError(f"{exchange.request_id}: not a stream: {text[:300]}")
    for event in text.split("\n\n"):
        # SSE lines end only at CR, LF or CRLF; str.splitlines also splits at U+0085, U+2028 … which the
        # random model writes into its arguments (a CI run's stream carried a raw U+0085)
        lines = SSE_LINE_END.split(event)
        data = "".join(line[len("data:"):].strip() for line in lines if line.startswith("data:"))
        if not data:
            continue
        if data == "[DONE]":
            answer.done = True
            continue
        obj = json.loads(data)
        if "error" in obj:
            answer.errors.append(obj["error"])
            continue
        for choice in obj.get("choices") or []:
            assert choice.get("index", 0) == 0, obj
            if choice.get("finish_reason"):
                answer.finish_reason = choice["finish_reason"]
            for tc in (choice.get("delta") or {}).get("tool_calls") or []:
                index = tc.get("index", 0)
                call = calls.setdefault(index, Call())
                if tc.get("id"):
                    assert not call.id or call.id == tc["id"], f"call {index} changed its id: {obj}"
                    call.id = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call.name = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    fragments[index].append(fn["arguments"])
    for index, call in calls.items():
        call.arguments = "".join(fragments[index])
    answer.calls = [calls[i] for i in sorted(calls)]
    return answer


def _dump(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=False, separators=(",", ":"))


def _messages_end(raw: bytes) -> int:
    """Where the messages array of a rushhour chat body ends (orjson: model, max_tokens, stream, messages, tools…)."""
    end = raw.find(b'],"tools":')
    assert raw.count(b'],"tools":') == 1 and end > raw.find(b'"messages":['), raw[:200]
    return end


def test_agents_carry_the_real_vllm_tool_call_into_the_next_step(fcfs_vllm: Any, tmp_path: Path) -> None:
    with RecordingProxy(fcfs_vllm.url) as proxy:
        summary = run_rushhour(SCENARIO, proxy.url, tmp_path / "runs")
        proxy.wait_idle()
    print("the wire, as recorded:", proxy.dump(tmp_path / "wire.jsonl"))
    wire = proxy.snapshot()
    out = summary["_stdout"]
    run_dir = Path(str(summary["_run_dir"]))
    records = [r for p in shard_paths(run_dir) for r in read_shard(p).lines
               if r["kind"] == "request" and not r["not_sent"]]
    assert records and all(r["persona"] == PERSONA for r in records), out  # no probes, one persona
    # every attempt rushhour recorded went through the proxy, and the proxy saw nothing else of its kind
    assert {r["request_id"] for r in records} == {rid for rid, x in wire.items() if x.path == "/v1/chat/completions"}
    assert not [x for x in proxy.unlabelled if x.method == "POST"], proxy.unlabelled
    answers = {r["request_id"]: parse_answer(wire[r["request_id"]]) for r in records}
    bodies = {rid: wire[rid].request_json() for rid in answers}
    assert all(b["tool_choice"] == "required" and b["tools"] == BUILTIN_TOOLS for b in bodies.values())
    # the profile pins output, but never a request that offers tools (pinned, no call could end)
    assert not any("min_tokens" in b or "ignore_eos" in b for b in bodies.values())
    assert not any(r["output_pinned"] for r in records)
    served = [r for r in records if answers[r["request_id"]].served]
    assert len(served) >= 6, out
    for r in served:
        a = answers[r["request_id"]]
        # tool_choice required: vLLM's structured output always starts a call; the answer ends by its JSON
        # closing (tool_calls) or by max_tokens (length)
        assert a.finish_reason in ("tool_calls", "length"), (r["request_id"], a)
        assert all(c.name in TOOL_NAMES and c.id for c in a.calls if c.name), a
        if a.finish_reason == "tool_calls":
            assert a.calls and all(c.name and c.whole_json for c in a.calls), a
        # rushhour's record names the tool vLLM streamed first (cut or not)
        assert r["tool_call"] == (a.name or None), (r, a)

    tasks: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        tasks[r["task_id"]][r["step"]].append(r)
    figures: Counter[str] = Counter()
    for task_id, steps in tasks.items():
        for k in sorted(steps):
            if k + 1 not in steps:
                continue
            # fanout 1: the one served attempt of step k is the branch the task continued from
            (branch,) = [r for r in steps[k] if answers[r["request_id"]].served]
            a = answers[branch["request_id"]]
            after = steps[k + 1][0]
            before_raw, later_raw = wire[branch["request_id"]].request_body, wire[after["request_id"]].request_body
            before, later = bodies[branch["request_id"]]["messages"], bodies[after["request_id"]]["messages"]
            where = f"{task_id} step {k} -> {k + 1}: {a}"
            # byte-identical history: the earlier request's bytes up to the end of its last message start the
            # later one (same model, max_tokens, stream, the same messages), so the prefix cache sees them
            end = _messages_end(before_raw)
            assert later_raw[:end] == before_raw[:end], where
            assert later_raw[end:end + 1] == b",", where
            assert [_dump(m) for m in later[: len(before)]] == [_dump(m) for m in before], where
            assert later[-1]["role"] == "user" and len(later) == len(before) + 3, where  # call, result, new note
            carried_msg, result_msg = later[len(before)], later[len(before) + 1]
            call = a.replayable
            if call is not None:
                # the actual call, exactly as vLLM streamed it, then the tool's answer to that id
                fn = {"name": call.name, "arguments": call.arguments}
                want = {"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function",
                                                                              "function": fn}]}
                assert carried_msg == want, (where, carried_msg)
                assert set(result_msg) == {"role", "tool_call_id", "content"}, (where, result_msg)
                assert result_msg["role"] == "tool" and result_msg["tool_call_id"] == call.id, (where, result_msg)
                assert len(result_msg["content"]) >= APPEND_TOKENS * 4 - 8, result_msg
                figures["carried"] += 1
                if a.finish_reason == "tool_calls":
                    figures["carried_finished"] += 1
                    if len(a.calls) > 1:
                        figures["carried_first_of_parallel_calls"] += 1  # only calls[0] goes back
                else:
                    assert call is not a.calls[-1], where  # the cut call itself is never replayed
                    figures["carried_earlier_call_of_cut_answer"] += 1  # parallel calls: the first one had closed
            else:
                # a call cut by max_tokens (whatever its streamed part), or none streamed: the answer is carried
                # as text of the length it produced, the tool result as a user message; nothing of the cut call
                assert a.finish_reason == "length", where
                assert set(carried_msg) == {"role", "content"} and carried_msg["role"] == "assistant", (where,
                                                                                                      carried_msg)
                assert isinstance(carried_msg["content"], str) and carried_msg["content"], (where, carried_msg)
                assert set(result_msg) == {"role", "content"} and result_msg["role"] == "user", (where, result_msg)
                assert len(result_msg["content"]) >= APPEND_TOKENS * 4 - 8, result_msg
                figures["cut_carried_as_text"] += 1
            # vLLM took the carried history (the next step was answered, not refused)
            assert answers[after["request_id"]].status == 200, (where, wire[after["request_id"]].response_body[:300])
            figures["pairs"] += 1
    # no tool message anywhere but right after the call it answers
    for rid, body in bodies.items():
        msgs = body["messages"]
        for i, m in enumerate(msgs):
            if m["role"] == "tool":
                prev = msgs[i - 1]
                assert prev["role"] == "assistant" and prev["tool_calls"][0]["id"] == m["tool_call_id"], rid

    # the audit's agent figures = what the proxy saw
    agents = tiers(summary)[TIER]["agents"]
    assert isinstance(agents, dict), tiers(summary)[TIER]
    called = [answers[r["request_id"]] for r in served if answers[r["request_id"]].name]
    wire_figures = {
        "requests_with_tools": len({r["logical_id"] for r in records if "tools" in bodies[r["request_id"]]}),
        "served_with_tools": len(served),
        "tool_call_answers": len(called),  # cut calls included: the answer did call a tool
        "tool_calls_by_name": dict(Counter(a.name for a in called)),
        "subagent_spawns": 0,
        "subagent_requests": 0,
    }
    figures.update({
        "requests": len(records), "served": len(served), "tool_call_answers": len(called),
        "finished_call_answers": sum(a.finish_reason == "tool_calls" for a in called),
        "answers_with_parallel_calls": sum(len(a.calls) > 1 for a in called),
        "cut_call_answers": sum(a.finish_reason == "length" for a in called),
        "cut_call_answers_that_parse": sum(a.finish_reason == "length" and a.calls[-1].whole_json for a in called),
    })
    print("agents on the wire:", json.dumps(dict(figures), sort_keys=True), json.dumps(wire_figures, sort_keys=True))
    assert agents == wire_figures, (agents, wire_figures)
    assert figures["carried_finished"] >= 2, (dict(figures), out)
    # and the cut path was taken (which way depends on where max_tokens fell: asserted above whenever it was)
    cut = ("cut_carried_as_text", "carried_earlier_call_of_cut_answer")
    assert sum(figures[k] for k in cut) >= 1, dict(figures)
