"""Shards of a multi-host run: lost workers are named, other hosts' shards sit on the wall clock."""

from __future__ import annotations

from pathlib import Path

from helpers import ANCHOR, MS, RunBuilder

from rushhour.audit import run_audit
from rushhour.audit.gates import EXIT_INVALID
from rushhour.records.manifest import read_manifest, write_manifest
from rushhour.records.record import Anchor, EventRecord, RequestRecord, ShardWriter

S = 1_000_000_000
TIERS_ONE = [{"name": "gold", "priority": 10, "slo": {}}]


def _served(run_id: str, seq: int, t: int) -> RequestRecord:
    return RequestRecord(run_id=run_id, seq=seq, request_id=f"x-{seq}", logical_id=f"x-{seq}",
                         tier="gold", tenant="g", persona="chat-gold",
                         intended_ns=t, sent_ns=t, status=200, complete=True, headers_ns=t + 50 * MS,
                         first_token_ns=t + 100 * MS, last_token_ns=t + 300 * MS, done_ns=t + 300 * MS, tokens=5,
                         output_tokens=5, prompt_tokens=100)


def test_a_dead_worker_is_named_by_its_shard(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS_ONE, duration_s=20)
    for i in range(20):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
    for proc in ("p1", "p2"):
        w = b.writer(proc)
        w.write(EventRecord("r1", w.next_seq(), 0, "worker_start", {}))
    w = b.writer("p1")
    w.write(EventRecord("r1", w.next_seq(), 20 * S, "worker_stop", {"reason": "completed"}))
    s = run_audit(b.close())
    assert s.exit_code == EXIT_INVALID
    assert s.validity.lost_workers == ["host-p2"]
    assert "(host-p2)" in s.validity.reasons[0]


def _remote_run(tmp_path: Path, header: dict[str, object] | None) -> Path:
    b = RunBuilder(tmp_path, tiers=TIERS_ONE, duration_s=20)
    b.writers["p1"] = ShardWriter(b.dir / "records" / "host-p1.jsonl", run_id="r1", anchor=ANCHOR, header=header)
    for i in range(10):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S)
    run_dir = b.close()
    manifest = read_manifest(run_dir)
    manifest.hostname = "the-master"  # every shard here was written on "another host"
    write_manifest(run_dir, manifest)
    # a remote worker: its monotonic clock is unrelated (booted at another time), its wall anchor the run's
    other = Anchor(mono_ns=ANCHOR.mono_ns + 987_654_321_000, wall_ns=ANCHOR.wall_ns)
    with ShardWriter(run_dir / "records" / "far-7.jsonl", run_id="r1", anchor=other, header=header) as w:
        for i in range(10):
            w.write(_served("r1", w.next_seq(), i * S + S // 2))
    return run_dir


def test_remote_shards_are_aligned_on_the_wall_anchor_with_their_measured_uncertainty(tmp_path: Path) -> None:
    run_dir = _remote_run(tmp_path, {"clock_offset_ns": 1_200, "clock_uncertainty_ns": 250_000})
    s = run_audit(run_dir)
    assert s.validity.remote_shards == 2
    assert s.validity.clock_offset_uncertainty_ms == 0.25
    # the remote worker's requests keep their place on the run's clock (not 987 s away)
    assert s.tier("gold").requests == 20
    assert s.run.duration_s == 20.0  # on the mono clock it would have run 997 s


def test_a_remote_shard_without_a_measured_offset_has_an_unknown_uncertainty(tmp_path: Path) -> None:
    s = run_audit(_remote_run(tmp_path, None))
    assert s.validity.remote_shards == 2 and s.validity.clock_offset_uncertainty_ms is None


def test_one_host_has_no_clock_uncertainty(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS_ONE, duration_s=20)
    for i in range(5):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S)
    s = run_audit(b.close())
    assert s.validity.remote_shards == 0 and s.validity.clock_offset_uncertainty_ms == 0.0


def test_a_worker_that_quit_before_its_share_ended_makes_the_run_invalid(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, tiers=TIERS_ONE, duration_s=20)
    for i in range(5):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S)
    run_dir = b.close()
    manifest = read_manifest(run_dir)
    manifest.workers = {"expected": 3, "joined": ["a", "b", "c"], "finished": ["a"], "missing": ["c"]}
    write_manifest(run_dir, manifest)
    s = run_audit(run_dir)
    assert not s.validity.valid
    assert any("1 worker(s) quit before finishing their share (b)" in r for r in s.validity.reasons)
    manifest.workers = {"expected": 2, "joined": ["a", "b"], "finished": ["a", "b"], "missing": []}
    write_manifest(run_dir, manifest)
    assert run_audit(run_dir).validity.valid
