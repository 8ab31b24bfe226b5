"""The fast paths of the audit give exactly what the plain ones give (#13: audit speed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from support import load_script

import rushhour.audit.build as audit_mod
import rushhour.audit.load as load_mod
from rushhour.audit.load import PARSE_SCHEMA, ShardParts, _add_chunk, parse_jsonl, read_shard, split_tail
from rushhour.audit.validity import dark_spans

S = 1e9


def _random_attempts(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    sent = np.sort(rng.uniform(0, 200 * S, n))
    end = sent + rng.choice([0.2 * S, 3 * S, 30 * S, 120 * S], n)
    sent[rng.random(n) < 0.02] = np.nan
    end[rng.random(n) < 0.02] = np.nan
    dark = rng.random(n) < rng.choice([0.05, 0.5, 0.95])
    answers = np.concatenate([sent[~dark] + 0.1 * S, end[~dark]])
    answers[rng.random(len(answers)) < 0.01] = np.nan
    return sent, end, dark, answers


@pytest.mark.parametrize("seed", range(40))
def test_long_dark_spans_equal_the_plain_scan(seed: int) -> None:
    """``min_ns`` finds exactly the spans the per-span scan finds at least that long, in the same order."""
    rng = np.random.default_rng(seed)
    sent, end, dark, answers = _random_attempts(rng, int(rng.integers(1, 3000)))
    every = dark_spans(sent, end, dark, answers)
    for limit in (0.5 * S, 5 * S, 20 * S, 60 * S):
        fast = dark_spans(sent, end, dark, answers, min_ns=limit)
        assert fast == [s for s in every if s[1] - s[0] >= limit * (1 - 1e-9)]


def test_long_dark_spans_without_answers() -> None:
    sent = np.array([0.0, 1.0, 2.0]) * S
    end = sent + 10 * S
    assert dark_spans(sent, end, np.ones(3, bool), np.array([]), min_ns=5 * S) == [(0.0, 12 * S, 3)]


@pytest.mark.parametrize("content", [b"", b"abc", b"{}\n", b'{}\n{"a"', b"{}\n  \n", b"{}\n   ", b"x" * 200_000,
                                     b"{}\n" + b"y" * 200_000, b"\n" * 5])
def test_shard_tail_as_the_bytes_path_cuts_it(tmp_path: Path, content: bytes) -> None:
    """The memory-mapped shard cuts a killed writer's last line exactly as the bytes path does."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(content)
    parts = read_shard(path)
    body, cut = split_tail(content)
    parsed = parse_jsonl(body, PARSE_SCHEMA)
    reference = ShardParts(cut=cut, skipped=int(cut) + parsed.skipped)
    if parsed.table is not None:
        _add_chunk(reference, parsed.table)
    assert (parts.cut, parts.skipped, parts.parsed) == (reference.cut, reference.skipped, reference.parsed)


def _shard_lines(rng: np.random.Generator, n: int) -> bytes:
    lines = [json.dumps({"kind": "shard", "host": "h", "pid": 7, "mono_anchor_ns": 5, "wall_anchor_ns": 9})]
    for i in range(n):
        roll = rng.random()
        if roll < 0.03:
            lines.append('{"kind":"request","seq":')  # torn
        elif roll < 0.05:
            lines.append(json.dumps({"kind": "request", "seq": i, "status": "two hundred"}))  # wrong type
        elif roll < 0.07:
            lines.append(json.dumps({"kind": "event", "ts_ns": i, "name": "worker_start" if i % 2 else "x"}))
        elif roll < 0.08:
            lines.append(json.dumps({"kind": "mystery", "seq": i}))
        elif roll < 0.09:
            lines.append("")
        else:
            lines.append(json.dumps({"kind": "request", "seq": i, "request_id": f"r{i}", "tier": "a",
                                     "status": 200, "endpoint": "http://x", "model": "m"}))
    return ("\n".join(lines) + "\n").encode()


def _decoded(table: pa.Table) -> pa.Table:
    """Text kept as a dictionary per chunk (each chunk its own dictionary) compared by its values."""
    return pa.table({name: col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col
                     for name, col in zip(table.column_names, table.columns, strict=True)})


@pytest.mark.parametrize("chunk", [1 << 10, 7_777, 1 << 20])
def test_a_shard_read_in_chunks_equals_one_read(tmp_path: Path, chunk: int) -> None:
    """Chunking changes nothing: the same rows per kind, the same lines skipped, the same events counted."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(_shard_lines(np.random.default_rng(chunk), 1500) + b'{"kind":"request","se')
    whole, parts = read_shard(path, chunk_bytes=1 << 30), read_shard(path, chunk_bytes=chunk)
    assert len(parts.per_kind["request"]) > 1 or chunk == 1 << 20
    for kind in whole.per_kind:
        one = _decoded(pa.concat_tables(whole.per_kind[kind])) if whole.per_kind[kind] else None
        many = _decoded(pa.concat_tables(parts.per_kind[kind])) if parts.per_kind[kind] else None
        assert (one is None) == (many is None)
        assert one is None or one.equals(many)
    assert (parts.skipped, parts.cut, parts.worker_starts, parts.worker_stops) == (
        whole.skipped, whole.cut, whole.worker_starts, whole.worker_stops)
    assert parts.skipped > 0 and parts.cut


def _bench() -> Any:
    return load_script("benchmarks/audit.py")


def test_a_run_audited_in_small_chunks_equals_one_chunk_per_shard(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's realistic run (retries, drops, timeouts, health, metrics), audited with shards cut
    into 8 KiB chunks and whole: summary.json and the attempts table are identical."""
    run = tmp_path / "run"
    _bench().synthesise(run, 4000)
    whole = audit_mod.audit(run, with_table=True)
    monkeypatch.setattr(load_mod, "CHUNK_BYTES", 8 << 10)
    chunked = audit_mod.audit(run, with_table=True)
    assert chunked.summary.model_dump_json() == whole.summary.model_dump_json()
    assert chunked.table is not None and whole.table is not None and chunked.table.equals(whole.table)
    assert whole.summary.records == 4000 and whole.summary.tiers[0].by_class["served"] > 0


def test_narrow_frames_give_what_wide_frames_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory cuts change no figure: ids as arrow strings, text as per-chunk dictionaries, each tier's slice
    without the columns no tier figure reads, evidence from its own columns; audited the wide way (ids as Python
    text, every column in every tier's slice) the same run gives the same summary and table."""
    run = tmp_path / "run"
    _bench().synthesise(run, 3000)
    narrow = audit_mod.audit(run, with_table=True)
    monkeypatch.setattr(load_mod, "_ARROW_TEXT", ())
    monkeypatch.setattr(audit_mod, "_NOT_PER_TIER", ("request_id", "logical_id", "twin_of"))
    monkeypatch.setattr(audit_mod, "_DERIVED_ONLY", ())
    monkeypatch.setattr(audit_mod, "_EVIDENCE_COLUMNS", (*load_mod.REQUEST_USED, "cls", "unserved", "t_end_ns"))
    wide = audit_mod.audit(run, with_table=True)
    assert narrow.summary.model_dump_json() == wide.summary.model_dump_json()
    assert narrow.table is not None and wide.table is not None and narrow.table.equals(wide.table)
    assert narrow.summary.evidence


def test_loaded_frame_is_compact(tmp_path: Path) -> None:
    """Ids stay arrow strings, repeated text is categorical, and arrow's memory goes through the system pool
    (freed buffers leave the process instead of staying in mimalloc's segments)."""
    import pandas as pd

    run = tmp_path / "run"
    _bench().synthesise(run, 2000)
    data = load_mod.load_run(run)
    req = data.requests
    assert isinstance(req["request_id"].dtype, pd.ArrowDtype) and isinstance(req["logical_id"].dtype, pd.ArrowDtype)
    for name in ("tier", "tenant", "persona", "route", "reason", "error", "task_id"):
        assert isinstance(req[name].dtype, pd.CategoricalDtype), name
    assert pa.default_memory_pool().backend_name == "system"
    parts = read_shard(next((run / "records").glob("*.jsonl")))
    assert pa.types.is_dictionary(parts.per_kind["request"][0].schema.field("tier").type)


def test_trim_is_safe_to_call_anywhere() -> None:
    """``memory.trim`` hands free heap pages back (glibc) or does nothing; it never fails or frees live data."""
    from rushhour.audit import memory

    live = np.arange(1 << 20, dtype=np.float64)
    garbage = np.ones(4 << 20)
    del garbage
    memory.trim()
    memory.trim()
    assert live.sum() == float((1 << 20) * ((1 << 20) - 1) // 2)


def test_the_benchmark_reads_what_the_audit_reads_to_warm_the_cache(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``--cache warm`` reads the sidecars (the JSONL in the jsonl case) and only them; as-found reads nothing."""
    bench = _bench()
    run = tmp_path / "run"
    bench.synthesise(run, 500)
    opened: list[str] = []
    real_open = Path.open

    def spy(self: Path, *args: Any, **kwargs: Any) -> Any:
        opened.append(self.name)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    bench.page_cache(run, "warm")
    assert opened and all(name.endswith(".arrows") for name in opened)
    opened.clear()
    bench.page_cache(run, "warm", jsonl=True)
    assert opened and all(name.endswith(".jsonl") for name in opened)
    opened.clear()
    bench.page_cache(run, "as-found")
    assert opened == []
