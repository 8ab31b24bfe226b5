"""The record contract: durable shards, tolerant reader, no credential ever written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from rushhour.records.manifest import read_manifest, write_manifest
from rushhour.records.record import (
    Anchor,
    HealthRecord,
    RequestRecord,
    ShardWriter,
    TaskRecord,
    fingerprint,
    read_shard,
    redact,
    register_secret,
    short_text,
)


def _request(seq: int, **kw: object) -> RequestRecord:
    base = dict(run_id="r1", seq=seq, request_id=f"req-{seq}", logical_id=f"req-{seq}", tier="batch",
                tenant="t0", persona="chat")
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]


def test_round_trip_all_kinds(tmp_path: Path) -> None:
    anchor = Anchor.now()
    with ShardWriter(tmp_path / "s.jsonl", run_id="r1", anchor=anchor) as writer:
        writer.write(_request(1, status=429, reason="rejected-saturated", sent_ns=5, done_ns=9))
        writer.write(TaskRecord(run_id="r1", seq=2, task_id="task", persona="agents", tier="batch", tenant="t"))
        writer.write(HealthRecord(run_id="r1", seq=3, ts_ns=1, loop_lag_ns=2, cpu_percent=3.5))
    contents = read_shard(tmp_path / "s.jsonl")
    assert contents.header is not None and contents.header["mono_anchor_ns"] == anchor.mono_ns
    assert [line["kind"] for line in contents.lines] == ["request", "task", "health"]
    first = contents.lines[0]
    assert first["status"] == 429 and first["reason"] == "rejected-saturated" and first["schema"] == 1
    assert "token_ns" not in first  # only written when asked for
    assert contents.skipped == 0 and not contents.truncated_tail


def test_truncated_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with ShardWriter(path, run_id="r1", anchor=Anchor.now()) as writer:
        for i in range(3):
            writer.write(_request(i))
    with path.open("ab") as handle:
        handle.write(b'{"kind":"request","seq":99,"tier":"ba')  # a writer killed mid-line
    contents = read_shard(path)
    assert len(contents.lines) == 3
    assert contents.skipped == 1 and contents.truncated_tail


def test_credentials_never_reach_a_shard(tmp_path: Path) -> None:
    secret = "sk-live-0123456789abcdefghijklmnop"
    register_secret(secret)
    path = tmp_path / "s.jsonl"
    with ShardWriter(path, run_id="r1", anchor=Anchor.now()) as writer:
        writer.write(_request(1, error=f"invalid key {secret} for org", reason=f"Bearer {secret}",
                              in_band_error=f'{{"api_key": "{secret}"}}', key_fingerprint=fingerprint(secret)))
        writer.write(_request(2, error="Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123"))
    raw = path.read_text()
    assert secret not in raw
    assert "abcdefghijklmnopqrstuvwxyz0123" not in raw
    assert "[redacted]" in raw
    assert fingerprint(secret).startswith("fp:") and fingerprint(secret) in raw


def test_short_text_sanitises_hostile_bodies() -> None:
    hostile = b"<html>\x00\x1b[31m" + b"A" * 5000 + b"\xff\xfe"
    text = short_text(hostile)
    assert text is not None and len(text) <= 300
    assert "\x00" not in text and "\x1b" not in text
    assert redact("x-api-key: abcdef123456") == "x-api-key: [redacted]"


def test_manifest_round_trip(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"run_id": "r1", "mono_anchor_ns": 5})
    assert read_manifest(tmp_path).mono_anchor_ns == 5


_WRITER_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rushhour.records.record import Anchor, RequestRecord, ShardWriter
    writer = ShardWriter(Path(sys.argv[1]), run_id="r", anchor=Anchor.now(), flush_interval_s=0.05)
    i = 0
    while True:
        i += 1
        writer.write(RequestRecord(run_id="r", seq=i, request_id=str(i), logical_id=str(i), tier="t",
                                   tenant="x", persona="p"))
        if i % 50 == 0:
            writer.flush()
            print(i, flush=True)
        time.sleep(0.0005)
    """
)


def test_kill_9_keeps_every_flushed_line(tmp_path: Path) -> None:
    path = tmp_path / "shard.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER_SCRIPT, str(path)], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout is not None
    flushed = 0
    deadline = time.monotonic() + 20
    while flushed < 500 and time.monotonic() < deadline:
        flushed = int(proc.stdout.readline() or 0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    contents = read_shard(path)
    seqs = [line["seq"] for line in contents.lines]
    assert flushed >= 500
    assert seqs[:flushed] == list(range(1, flushed + 1))  # every flushed line is there, in order
    assert contents.skipped <= 1  # at most the line being written when the kill hit
    for line in path.read_bytes().splitlines()[1:-1]:
        json.loads(line)


def test_server_texts_are_redacted_and_cut(tmp_path: Path) -> None:
    """A hostile server may echo the key in any text it controls, or send megabytes of it."""
    secret = "sk-test-THISISASECRET1234567890abcd"
    register_secret(secret)
    path = tmp_path / "s.jsonl"
    with ShardWriter(path, run_id="r1", anchor=Anchor.now()) as writer:
        writer.write(_request(1, service_tier=secret, reason="x" * 10_000_000,
                              endpoint="http://user:pw-secret@127.0.0.1:8000"))
    raw = path.read_text()
    assert secret not in raw and "pw-secret" not in raw
    line = read_shard(path).lines[0]
    assert len(line["reason"]) <= 300 and line["endpoint"] == "http://127.0.0.1:8000"
    assert len(raw) < 10_000
