"""The agent-trace reader: Weka sessions become trees (sub-agents off the call that spawned them, tool gaps, carried
context); a hostile file is one line naming the file and the line, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rushhour.loadgen import agent_traces
from rushhour.loadgen.agent_traces import read_agent_trace
from rushhour.loadgen.traces import TraceError

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent-trace" / "weka-sample.jsonl"


def _call(t: float, n_in: int, out: int, hashes: list[int], api: float = 0.5) -> dict[str, Any]:
    return {"t": t, "type": "n", "model": "m", "in": n_in, "out": out, "hash_ids": hashes, "api_time": api}


def _session(**over: Any) -> dict[str, Any]:
    """Main: calls at 0 s and 2 s (2nd carries the 1st's 2 blocks + a new one), 6 s; the 2 s call spawns 2 sub-agents
    (one counting its calls from its own start), both done by 4.5 s, so the 6 s call waited 1.5 s after them."""
    sub_a = {"t": 2.6, "type": "subagent", "agent_id": "a", "subagent_type": "Explore", "duration_ms": 1900,
             "requests": [_call(2.6, 150, 10, [1, 9]), _call(3.5, 300, 10, [1, 9, 10], api=1.0)]}
    sub_b = {"t": 2.7, "type": "subagent", "agent_id": "b", "subagent_type": "Plan",
             "requests": [_call(0.0, 140, 5, [1, 11])]}  # 0.0 < 2.7: relative to the sub-agent's start
    obj = {"id": "s1", "block_size": 100, "system_tokens": 80, "tool_tokens": 20,
           "requests": [_call(0.0, 200, 20, [1, 2]), _call(2.0, 260, 30, [1, 2, 3]), sub_a, sub_b,
                        _call(6.0, 400, 40, [1, 2, 3, 4])]}
    obj.update(over)
    return obj


def _write(tmp_path: Path, *lines: Any) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_a_session_becomes_a_tree_with_gaps_and_prefixes(tmp_path: Path) -> None:
    (s,) = read_agent_trace(_write(tmp_path, _session()))
    assert (s.session_id, s.line, s.system_tokens, s.calls, s.spawning_calls, s.subagent_calls) == ("s1", 1, 100, 6,
                                                                                                     1, 3)
    main = s.main.calls
    assert [c.t_s for c in main] == [0.0, 2.0, 6.0]
    spawner = main[1]
    assert [(r.agent_id, r.agent_type) for r in spawner.spawns] == [("a", "Explore"), ("b", "Plan")]
    a, b = spawner.spawns
    assert b.calls[0].t_s == pytest.approx(2.7)  # read relative to the sub-agent's own start
    # gaps: after the parent's answer (t + api_time); the main agent's next call after every sub-agent's answer
    assert main[1].gap_s == pytest.approx(1.5)
    assert a.calls[0].gap_s == pytest.approx(0.1) and a.calls[1].gap_s == pytest.approx(0.4)
    assert main[2].gap_s == pytest.approx(6.0 - 4.5)
    # prefixes: the main agent carries its context (all earlier blocks kept); a sub-agent shares the first block
    assert (main[0].prefix_tokens, main[0].carries) == (100, False)  # the system prompt and tools
    assert (main[1].prefix_tokens, main[1].carries) == (200, True)
    assert (a.calls[0].prefix_tokens, a.calls[0].carries) == (100, False)
    assert (a.calls[1].prefix_tokens, a.calls[1].carries) == (200, True)
    # every call follows exactly one answer: its agent's previous call, or the call that spawned it
    parents = {c.index: p for c, p in s.edges()}
    assert len(parents) == 6 and parents[main[0].index] is None
    assert parents[a.calls[0].index] == parents[b.calls[0].index] == spawner.index
    assert parents[a.calls[1].index] == a.calls[0].index and parents[main[2].index] == spawner.index


def test_without_hashes_a_growing_prompt_carries_and_a_shrinking_one_starts_over(tmp_path: Path) -> None:
    calls = [_call(0, 500, 50, []), _call(1, 700, 50, []), _call(2, 300, 50, [])]
    (s,) = read_agent_trace(_write(tmp_path, _session(requests=calls)))
    got = [(c.prefix_tokens, c.carries) for c in s.main.calls]
    assert got == [(100, False), (550, True), (100, False)]  # a compaction keeps the system part only


def test_the_sample_and_a_limit(tmp_path: Path) -> None:
    sessions = read_agent_trace(SAMPLE)
    assert [(s.calls, s.subagent_calls, s.spawning_calls) for s in sessions] == [(13, 9, 1), (9, 4, 1), (11, 7, 1)]
    assert all(c.prompt_tokens > 0 for s in sessions for r in s.runs() for c in r.calls)
    assert len(read_agent_trace(SAMPLE, limit=2)) == 2


@pytest.mark.parametrize(("line", "words"), [
    ("{not json", "not a JSON object"),
    ("[1, 2]", "the session is not a JSON object"),
    (json.dumps(_session(id=None)), "id is not a short string"),
    (json.dumps(_session(id="a\x1b[2Jb")), "id holds a control character"),
    (json.dumps(_session(block_size=0)), "block_size 0"),
    (json.dumps(_session(block_size=True)), "block_size is not a whole number"),
    (json.dumps(_session(requests=[])), "no call of its main agent"),
    (json.dumps(_session(requests="x")), "requests is not a list"),
    (json.dumps(_session(requests=[_call(0, -5, 1, [])])), "requests[0].in -5 is outside"),
    (json.dumps(_session(requests=[_call(0, 10**9, 1, [])])), "requests[0].in 1,000,000,000 is outside"),
    (json.dumps(_session(requests=[{**_call(0, 5, 1, []), "t": "soon"}])), "requests[0].t is not a finite number"),
    (json.dumps(_session(requests=[{**_call(0, 5, 1, []), "t": float("nan")}])), "not a finite number"),
    (json.dumps(_session(requests=[{**_call(0, 5, 1, []), "type": "x"}])), "has type 'x', not a call"),
    (json.dumps(_session(requests=[{**_call(0, 5, 1, []), "hash_ids": ["a"]}])), "other than whole numbers"),
    (json.dumps(_session(requests=[{**_call(0, 5, 1, []), "hash_ids": list(range(30_000))}])), "more than a"),
    (json.dumps(_session(requests=[_call(5, 5, 1, []),
                                   {"t": 1, "type": "subagent", "requests": [_call(1, 5, 1, [])]}])),
     "before the main agent's first call"),
    ("[" * 10_000 + "]" * 10_000, "nest"),
])
def test_hostile_lines_are_one_line_errors_naming_file_and_line(tmp_path: Path, line: str, words: str) -> None:
    path = _write(tmp_path, _session(), line)
    with pytest.raises(TraceError) as info:
        read_agent_trace(path)
    text = str(info.value)
    assert text.startswith(f"{path}:2: ") and words in text and "\n" not in text


def test_hostile_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\x00\x01garbage")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "\xe9"}\n')
    for path, words in [(empty, "no sessions"), (binary, "binary data"), (latin, "not UTF-8"),
                        (tmp_path / "missing.jsonl", "cannot read")]:
        with pytest.raises(TraceError, match=words):
            read_agent_trace(path)
    with pytest.raises(TraceError, match="unknown agent-trace format"):
        read_agent_trace(SAMPLE, "otel")
    monkeypatch.setattr(agent_traces, "MAX_CALLS", 4)
    with pytest.raises(TraceError, match="more than 4 calls in one session"):
        read_agent_trace(_write(tmp_path, _session()))
    monkeypatch.setattr(agent_traces, "MAX_LINE_BYTES", 100)  # one session's line is held to a size before it is read
    with pytest.raises(TraceError, match=r"t\.jsonl:1: a line of more than 100 bytes"):
        read_agent_trace(_write(tmp_path, _session()))


SCENARIO = """
name: agents
target: {{url: testbed, profile: vllm, metrics: null, testbed: {{preset: tiny}}}}
tiers: [{{name: t}}, {{name: b}}]
calibration: {{probes: 0}}
personas:
  - {{kind: agent_trace, name: a, tier: t, trace: "{trace}", session_gap_s: 2, subagent_tiers: {{Explore: {sub}}}}}
phases: [{{name: p, duration: 5s}}]
"""


def test_check_dry_run_and_context_fit_read_the_sessions(tmp_path: Path) -> None:
    """``scenario check`` reads the trace before anything runs (a bad line is a located error), the dry run counts
    the sessions that start within the phases and all their calls, and calls over the testbed's context are named."""
    from rushhour.fits import context_warnings
    from rushhour.loadgen.dryrun import plan
    from rushhour.loadgen.traces import localise_traces
    from rushhour.scenarios import ScenarioError, load_scenario

    path = tmp_path / "s.yaml"
    shutil.copy(SAMPLE, tmp_path / "t.jsonl")
    path.write_text(SCENARIO.format(trace="t.jsonl", sub="b"))
    scenario = localise_traces(load_scenario(path), tmp_path, [], str(path))
    (p,) = plan(scenario).personas
    sessions = read_agent_trace(SAMPLE)[:3]  # at 0, 2 and 4 s: all three start within the 5 s
    assert (p.units, p.requests) == (3, sum(s.calls for s in sessions))
    assert context_warnings(scenario) == []
    big = _session(requests=[_call(0, 5000, 10, []), _call(1, 100, 10, [])])
    _write(tmp_path, big)
    warning, = context_warnings(localise_traces(load_scenario(path), tmp_path, [], str(path)))
    assert "1 of the 2 calls of agent trace 't.jsonl' exceed the testbed's 4,096-token context" in warning
    _write(tmp_path, _session(), "{oops")
    with pytest.raises(ScenarioError, match=r"t\.jsonl:2: not a JSON object"):
        localise_traces(load_scenario(path), tmp_path, [], str(path))
    path.write_text(SCENARIO.format(trace="t.jsonl", sub="bach"))
    with pytest.raises(ScenarioError, match=r"subagent_tiers\.Explore: unknown tier 'bach'"):
        load_scenario(path)
