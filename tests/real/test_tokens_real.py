"""Tokenizer-exact prompts and pinned output against a real vLLM 0.32: intended equals what vLLM counts.

Counting tokens does not depend on the scheduler, so each test goes where the real pass's two groups stay even: the
token test on the FCFS twin (fcfs_vllm), the dataset test on the pinned vLLM (vllm_server). The same short chat
load runs twice against one vLLM (tiny Llama, its chat template): with the model's tokenizer named in the scenario
every served request's ``usage.prompt_tokens`` equals the intended count, and without it the figures of the byte
estimate are printed (docs/scenarios.md quotes them). Output is pinned (min_tokens + ignore_eos), so every served
request produced exactly its max_tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conftest import serve
from .helpers import run_rushhour, tiers

SCENARIO = {
    "name": "real-vllm-tokens",
    "seed": 5,
    "target": {"url": "http://127.0.0.1:8000", "profile": "vllm", "model": "tiny", "dialect": "openai-chat",
               "metrics": None},
    "calibration": {"probes": 0},
    "tiers": [{"name": "interactive", "priority": 10}],
    "personas": [{
        "kind": "chat", "name": "chat", "tier": "interactive", "arrival": {"process": "poisson", "rate": 1.5},
        "turns": {"dist": "uniform", "low": 1, "high": 4},
        "think_time_s": {"dist": "constant", "value": 0.2},
        "system_prompt_tokens": 40,
        "prompt_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.8, "min": 1, "max": 1500},
        "output_tokens": {"dist": "lognormal", "median": 16, "sigma": 0.5, "min": 1, "max": 48},
    }],
    "phases": [{"name": "steady", "duration": "12s"}],
    "drain_s": 60,
}


def _served(run_dir: Path) -> list[dict[str, object]]:
    rows = []
    for shard in sorted((run_dir / "records").glob("*.jsonl")):
        for line in shard.read_text().splitlines():
            row = json.loads(line)
            if row.get("kind") == "request" and row.get("complete") and row.get("status") == 200:
                rows.append(row)
    return rows


def _run(server, tmp_path: Path, name: str, **target: object) -> tuple[dict[str, object], list[dict]]:  # type: ignore[no-untyped-def]
    scenario = json.loads(json.dumps(SCENARIO))
    scenario["target"].update(target)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    summary = run_rushhour(path, server.url, tmp_path / name)
    rows = _served(Path(str(summary["_run_dir"])))
    assert len(rows) >= 8, (name, len(rows), summary["_stdout"])
    return summary, rows


def test_tokenizer_exact_prompts_and_pinned_output(fcfs_vllm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    exact_summary, exact = _run(fcfs_vllm, tmp_path, "exact", tokenizer=str(serve.tiny_model_dir()))
    estimate_summary, estimate = _run(fcfs_vllm, tmp_path, "estimate")
    figures = {
        name: tiers(summary)["interactive"]["tokens"]
        for name, summary in (("with_tokenizer", exact_summary), ("estimate", estimate_summary))
    }
    print(json.dumps(figures, indent=1))
    # with the tokenizer: exact, request by request, and the audit says so
    assert all(r["prompt_tokens_exact"] for r in exact)
    assert [r["prompt_tokens"] for r in exact] == [r["prompt_tokens_intended"] for r in exact]
    assert figures["with_tokenizer"]["prompt_share_exact"] == 1.0
    assert figures["with_tokenizer"]["prompt_exact_basis"] is True
    # without it the intended count is an estimate, named as such
    assert not any(r["prompt_tokens_exact"] for r in estimate)
    assert figures["estimate"]["prompt_exact_basis"] is False
    # pinned output (the vllm profile's default): every served request produced exactly what it asked for
    for rows in (exact, estimate):
        assert all(r["output_pinned"] for r in rows)
        assert [r["output_tokens"] for r in rows] == [r["max_tokens"] for r in rows]
    assert figures["with_tokenizer"]["output_share_equal"] == 1.0


def test_dataset_prompts_stay_exact(vllm_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Sessions replaying the shipped CC0 conversations (non-ASCII text, multi-turn, system texts) with the
    tokenizer: vLLM counts exactly what was intended, turn after turn."""
    scenario = json.loads(json.dumps(SCENARIO))
    scenario["target"]["tokenizer"] = str(serve.tiny_model_dir())
    persona = scenario["personas"][0]
    persona.pop("turns")
    persona.pop("prompt_tokens")
    persona["dataset"] = {"path": "chat-mini.jsonl", "output_tokens": "persona"}  # answers would be ~100 tokens
    path = tmp_path / "dataset.yaml"
    path.write_text(yaml.safe_dump(scenario))
    summary = run_rushhour(path, vllm_server.url, tmp_path / "dataset")
    rows = _served(Path(str(summary["_run_dir"])))
    assert len(rows) >= 8 and any(r["step"] >= 1 for r in rows), (len(rows), summary["_stdout"])
    print(json.dumps({"dataset_served": len(rows), "multi_turn": sum(1 for r in rows if r["step"] >= 1)}))
    assert all(r["prompt_tokens_exact"] for r in rows)
    assert [r["prompt_tokens"] for r in rows] == [r["prompt_tokens_intended"] for r in rows]
