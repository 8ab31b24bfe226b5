"""Shard shipping (loadgen/ship.py): names, complete lines, the master's receiver, the end of a run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from support import rushhour

from rushhour.loadgen.distributed import parse_master, resolve_master, worker_command
from rushhour.loadgen.ship import Receiver, all_done, complete_lines, read_anchor, safe_name, write_anchor


def test_safe_name_refuses_paths_and_hidden_files() -> None:
    assert safe_name("vm-123.jsonl") == "vm-123.jsonl"
    assert safe_name("rh-w1-77.jsonl") == "rh-w1-77.jsonl"
    for bad in ("../x.jsonl", "/etc/x.jsonl", ".hidden.jsonl", "a/b.jsonl", "x.txt", "a..b.jsonl", None, 3, b"x.jsonl"):
        assert safe_name(bad) is None, bad


def test_complete_lines_keeps_a_half_written_line_back() -> None:
    assert complete_lines(b'{"a":1}\n{"b"') == b'{"a":1}\n'
    assert complete_lines(b'{"b"') == b""
    assert complete_lines(b"") == b""


def test_all_done_waits_for_every_worker_that_is_not_missing() -> None:
    assert not all_done({"a": "running", "b": "running"}, {"a"})
    assert all_done({"a": "running", "b": "missing"}, {"a"})
    assert all_done({"a": "running", "b": "running"}, {"a", "b"})
    assert not all_done({"a": "missing"}, set())  # nobody finished: the run-time cap ends it
    # a worker that joined after the shares were dealt (index >= the run's count) is not waited for
    assert all_done({"a": "running", "b": "missing", "c": "running"}, {"a"}, {"c"})


def test_late_workers_are_those_indexed_past_the_run_s_count() -> None:
    from rushhour.loadgen.ship import late_workers

    class Runner:
        def __init__(self) -> None:
            self.worker_indexes = {"a": 0, "b": 1, "c": 2}

    assert late_workers(Runner(), ["a", "b", "c"], 2) == {"c"}
    assert late_workers(Runner(), ["a", "b", "c"], 0) == set()  # unknown count: wait for everyone
    assert late_workers(object(), ["a"], 2) == set()


def test_parse_master() -> None:
    assert parse_master("10.0.0.1") == ("10.0.0.1", 5557)
    assert parse_master("master.example:6000") == ("master.example", 6000)
    assert parse_master("[fd00::1]:7000") == ("fd00::1", 7000)
    assert parse_master("fd00::1") == ("fd00::1", 5557)
    for bad in ("", "host:0", "host:x", ":5557", "[fd00::1", "bad:host:x", "fd00::1:x"):
        with pytest.raises(ValueError):
            parse_master(bad)
    cmd = worker_command("10.0.0.1:6000")
    assert cmd[cmd.index("--master-host") + 1] == "10.0.0.1" and cmd[cmd.index("--master-port") + 1] == "6000"
    assert "--worker" in cmd


def test_a_master_name_that_does_not_resolve_is_one_line_at_once() -> None:
    resolve_master("localhost", wait_s=0)
    with pytest.raises(ValueError, match=r"cannot resolve 'no-such-master\.invalid'"):
        resolve_master("no-such-master.invalid", wait_s=0)
    # Locust alone retried that name for 5 minutes: the 120-s timeout is the hang this catches
    out = rushhour("worker", "--master", "bad:host:x", timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "more than one ':'" in out.stderr


def test_anchor_file_round_trip(tmp_path: Path) -> None:
    assert read_anchor(tmp_path) is None
    write_anchor(tmp_path, 5, 7)
    assert read_anchor(tmp_path) == (5, 7)


class _Msg:
    def __init__(self, data: Any, node_id: str = "w1") -> None:
        self.data, self.node_id = data, node_id


class _Runner:
    """What the receiver needs of Locust's master runner (the e2e tests use the real one)."""

    def __init__(self, workers: tuple[str, ...] = ("w1", "w2", "w9")) -> None:
        self.sent: list[tuple[str, Any, str | None]] = []
        self.worker_indexes = {w: i for i, w in enumerate(workers)}  # registered (authenticated) workers

    def send_message(self, kind: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append((kind, data, client_id))


def test_receiver_appends_batches_skips_a_resent_part_and_checks_the_sum(tmp_path: Path) -> None:
    rx = Receiver(_Runner(), tmp_path)
    lines = b'{"kind":"shard"}\n{"kind":"request","seq":1}\n{"kind":"request","seq":2}\n'
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": 0, "data": lines[:17]}))
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": 0, "data": lines[:44]}))  # resent after a failed send
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": 44, "data": lines[44:]}))
    rx.on_done(_Msg({"name": "w-1.jsonl", "size": len(lines), "sha256": hashlib.sha256(lines).hexdigest()}))
    assert (tmp_path / "records" / "w-1.jsonl").read_bytes() == lines
    log = [json.loads(line) for line in (tmp_path / "workers.jsonl").read_text().splitlines()]
    assert next(e for e in log if e["event"] == "shard_complete")["ok"] is True


def test_receiver_refuses_a_path_and_a_gap_and_writes_nothing_for_them(tmp_path: Path) -> None:
    rx = Receiver(_Runner(), tmp_path)
    rx.on_shard(_Msg({"name": "../escape.jsonl", "offset": 0, "data": b"x\n"}))
    assert not (tmp_path / "escape.jsonl").exists()
    rx.on_shard(_Msg({"name": "w-2.jsonl", "offset": 10, "data": b"late\n"}))
    rx.close()
    log = [json.loads(line) for line in (tmp_path / "workers.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("reason")) for e in log] == [("batch_refused", "malformed"), ("batch_refused", "gap")]
    assert not (tmp_path / "records" / "w-2.jsonl").exists()


def test_a_far_offset_batch_does_not_cut_the_real_lines_that_follow(tmp_path: Path) -> None:
    rx = Receiver(_Runner(), tmp_path)
    lines = b'{"kind":"shard"}\n{"kind":"request","seq":1}\n'
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": 0, "data": lines[:17]}))
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": 10**9, "data": b"forged\n"}))  # before: every later line cut
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": 17, "data": lines[17:]}))
    assert (tmp_path / "records" / "w-1.jsonl").read_bytes() == lines
    assert rx.refused == {"gap": 1}
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": -5, "data": b"x\n"}))
    rx.on_done(_Msg({"name": "w-1.jsonl", "size": len(lines), "sha256": hashlib.sha256(lines).hexdigest()}))
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": len(lines), "data": b"after\n"}))
    rx.close()
    assert (tmp_path / "records" / "w-1.jsonl").read_bytes() == lines
    assert rx.refused == {"gap": 1, "malformed": 1, "after_done": 1}
    events = [json.loads(line)["event"] for line in (tmp_path / "workers.jsonl").read_text().splitlines()]
    assert "shard_incomplete" not in events and events.count("shard_open") == 1


def test_only_a_registered_worker_writes_and_only_its_own_shard(tmp_path: Path) -> None:
    rx = Receiver(_Runner(), tmp_path)
    rx.on_shard(_Msg({"name": "x.jsonl", "offset": 0, "data": b"made up\n"}, node_id="never-joined"))
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": 0, "data": b"a\n"}, node_id="w1"))
    rx.on_shard(_Msg({"name": "w-1.jsonl", "offset": 2, "data": b"b\n"}, node_id="w2"))  # another worker's shard
    rx.on_done(_Msg({"name": "w-1.jsonl", "size": 0, "sha256": ""}, node_id="w2"))
    rx.on_finished(_Msg({}, node_id="never-joined"))
    assert not (tmp_path / "records" / "x.jsonl").exists()
    assert (tmp_path / "records" / "w-1.jsonl").read_bytes() == b"a\n"
    assert rx.refused == {"unregistered": 1, "not_its_shard": 2} and rx.finished == set()


def test_batch_size_and_shard_count_are_bounded(tmp_path: Path) -> None:
    from rushhour.loadgen import ship

    rx = Receiver(_Runner(), tmp_path)
    rx.on_shard(_Msg({"name": "big.jsonl", "offset": 0, "data": b"x" * (ship.MAX_BATCH_BYTES + 1)}))
    for n in range(2000):  # before: 2,000 names held 2,000 open files
        rx.on_shard(_Msg({"name": f"n{n}.jsonl", "offset": 0, "data": b"a\n"}))
    assert len(rx._fds) == ship.MAX_SHARDS_PER_WORKER
    assert rx.refused == {"batch_too_large": 1, "too_many_shards": 2000 - ship.MAX_SHARDS_PER_WORKER}
    assert not (tmp_path / "records" / "big.jsonl").exists()
    lines = (tmp_path / "workers.jsonl").read_text().splitlines()
    assert len(lines) < 20  # a flood of refusals writes a few lines, not a flood
    rx.close()


def test_the_master_measures_the_clock_on_its_own_clock(tmp_path: Path) -> None:
    from rushhour.loadgen.ship import best_offset

    # master sends at 1,000 and receives at 1,200 (its clock); the worker said 600: offset 1,100 - 600
    got = best_offset([(1000, 1400, 100), (1000, 1200, 600)])
    assert got is not None and got.offset_ns == 500 and got.uncertainty_ns == 100
    assert best_offset([]) is None
    runner = _Runner()
    rx = Receiver(runner, tmp_path)
    rx.on_clock(_Msg({"t0": 123, "master_ns": 5}, node_id="stranger"))  # not registered: not measured
    assert runner.sent == []


def test_budget_usage_is_kept_per_process_and_summed() -> None:
    from rushhour.loadgen.ship import merge_budget_usage

    def usage(requests: int, cost: float, reached: str | None = None) -> dict[str, Any]:
        return {"requests": requests, "prompt_tokens": 10 * requests, "output_tokens": requests,
                "tokens": 11 * requests, "cost_usd": cost, "in_flight": 0, "refused": 1 if reached else 0,
                "reached": reached}

    events = [
        {"name": "budget_usage", "shard": "a-1", "detail": {"workers": 2, "worker_index": 0,
                                                            "run": usage(5, 0.25, "max_requests"),
                                                            "tiers": {"gold": usage(5, 0.25)}}},
        {"name": "worker_stop", "shard": "a-1", "detail": {}},
        {"name": "budget_usage", "shard": "b-2", "detail": {"workers": 2, "worker_index": 1, "run": usage(3, 0.125),
                                                            "tiers": {"gold": usage(2, 0.1), "free": usage(1, 0.025)}}},
    ]
    merged = merge_budget_usage(events)
    assert merged is not None and set(merged["processes"]) == {"a-1", "b-2"}
    assert merged["run"]["requests"] == 8 and merged["run"]["cost_usd"] == 0.375 and merged["run"]["refused"] == 1
    assert merged["run"]["reached_by"] == ["a-1: max_requests"]
    assert merged["tiers"]["gold"]["requests"] == 7 and merged["tiers"]["free"]["tokens"] == 11
    assert merge_budget_usage([{"name": "worker_stop"}]) is None


def test_a_worker_first_seen_running_counts_as_joined(tmp_path: Path) -> None:
    """The watcher polls every 0.5 s: a worker may be first noted 'running', never 'ready'."""
    from rushhour.loadgen.runner import RunOptions, workers_summary
    lines = [
        {"event": "worker_state", "worker": "w1", "state": "running", "index": 0},
        {"event": "worker_state", "worker": "w2", "state": "spawning", "index": 1},
        {"event": "worker_finished", "worker": "w1"},
        {"event": "worker_state", "worker": "w2", "state": "missing", "index": 1},
        {"event": "worker_state", "worker": "w2", "state": "gone"},
    ]
    (tmp_path / "workers.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = workers_summary(tmp_path, RunOptions(expect_workers=2))
    assert summary["joined"] == ["w1", "w2"]
    assert summary["finished"] == ["w1"] and summary["missing"] == ["w2"]
