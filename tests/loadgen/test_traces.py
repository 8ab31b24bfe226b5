"""Azure CSV and Mooncake JSONL readers; replay prompts reuse text for shared prefix blocks."""

from __future__ import annotations

import itertools
from pathlib import Path

from rushhour.loadgen.engine.personas.replay import prompt_for
from rushhour.loadgen.traces import read_trace, schedule
from rushhour.scenarios.distributions import resolve_trace_path
from rushhour.scenarios.model import TraceReplayPersona


def test_azure_crlf_no_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(
        b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n"
        b"2023-11-16 18:15:50.9951690,396,109"
    )
    rows = read_trace(path)
    assert [(round(r.t_s, 4), r.prompt_tokens, r.output_tokens) for r in rows] == [(0.0, 374, 44), (4.3146, 396, 109)]


def test_shipped_traces_parse() -> None:
    azure = read_trace(resolve_trace_path("AzureLLMInferenceTrace_conv.csv"))
    assert len(azure) > 19000 and azure[0].t_s == 0
    moon = read_trace(resolve_trace_path("mooncake_fast25_conversation_trace.jsonl"))
    assert len(moon) > 12000 and moon[0].hash_ids[0] == 0


def test_schedule_scales_and_limits() -> None:
    rows = read_trace(resolve_trace_path("AzureLLMInferenceTrace_conv.csv"))
    plan = schedule(rows, time_scale=10, start_s=60, limit=50, end_s=1000)
    assert len(plan) == 50 and plan[0][0] >= 0
    assert all(b[0] >= a[0] for a, b in itertools.pairwise(plan))
    assert plan[-1][0] == (plan[-1][1].t_s - 60) / 10


def test_mooncake_shared_blocks_share_prefix_bytes() -> None:
    rows = read_trace(resolve_trace_path("mooncake_fast25_conversation_trace.jsonl"))
    persona = TraceReplayPersona(kind="trace_replay", name="m", tier="t", trace="x")
    a, b = rows[0], rows[1]
    shared = 0
    while a.hash_ids[shared] == b.hash_ids[shared]:
        shared += 1
    pa, pb = prompt_for(persona, a).flat(), prompt_for(persona, b).flat()
    assert len(pa) == a.prompt_tokens * 4
    assert pa[: shared * 512 * 4] == pb[: shared * 512 * 4]
    assert pa[shared * 512 * 4 : shared * 512 * 4 + 64] != pb[shared * 512 * 4 : shared * 512 * 4 + 64]
