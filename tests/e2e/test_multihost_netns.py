"""A multi-host run across real network hosts on one machine: network namespaces made by this test.

Four hosts, each its own network namespace (``rh-<tag>-<test pid>-m|w1|w2|tb``): the master (`rushhour run
--expect-workers 2`), two workers (`rushhour worker --master …`) and the testbed. A bridge in the
master's namespace joins them over veth pairs in a private 10.213.x.0/24 that exists only inside these
namespaces (nothing is routed outside them). Required: per-tier counts per class equal the testbed's
ledger; a worker killed by PID mid-run gives an invalid run that names it and keeps every record it
shipped, and the run still ends on time. The namespaces are deleted in a ``finally`` (stale ones of
a killed test, whose PID is gone, are cleaned at the start).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from audit import run_audit
from audit.ledger import compare_with_ledger
from loadgen import testbed_proc
from loadgen.manifest import read_manifest
from loadgen.record import read_shard
from loadgen.ship import read_anchor
from loadgen.testbed_proc import child_env
from scenarios import load_scenario

pytestmark = pytest.mark.e2e

ROLES = ("m", "w1", "w2", "tb")
# rh-<tag>-<pid of the test that made it>-<role>: a namespace is stale only when that test is gone (two
# runs of this test at once, e.g. two checkouts, must not tear down each other's hosts)
OURS = re.compile(r"^rh-[0-9a-f]{6}-(?P<pid>[0-9]+)-(m|w1|w2|tb)$")
MASTER_PORT = 5557
TESTBED_PORT = 18080
RUSHHOUR = [sys.executable, "-c", "import sys; from rushhour.cli import app; sys.argv[0] = 'rushhour'; sys.exit(app())"]

SCENARIO = """
name: multihost
seed: 23
target:
  url: {url}
  profile: llm-d
  model: testbed-model
  testbed: {{preset: tiny, replicas: 1, config: {{band_max_requests: 2}}}}   # batch overflows: 429s
  metrics: null
calibration: {{probes: 0}}
tiers:
  - {{name: interactive, priority: 100, tenants: 2}}
  - {{name: batch, priority: -1, objective: batch-sheddable, tenants: [acme, globex]}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {{process: poisson, rate: 6}}
    turns: 2
    think_time_s: 0.3
    prompt_tokens: {{dist: uniform, low: 20, high: 200}}
    output_tokens: {{dist: uniform, low: 4, high: 16}}
  - kind: chat
    name: bulk
    tier: batch
    arrival: {{process: poisson, rate: 10}}
    turns: 1
    prompt_tokens: {{dist: uniform, low: 200, high: 600}}
    output_tokens: {{dist: uniform, low: 150, high: 250}}
phases:
  - {{name: main, duration: 10s}}
drain_s: 3
"""
RUN_S = 13.0  # phases + drain


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _remove(ns: str) -> None:
    """Stop what still runs inside one of our namespaces (by PID), then delete it."""
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=20).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Hosts:
    ns: dict[str, str]
    addr: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, role: str, cmd: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.ns[role], *cmd], cwd=cwd, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env())
        self.procs.append(proc)
        return proc


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("MULTI-HOST TEST NOT RUN: needs root, iproute2 (`ip netns add`) and util-linux (`unshare`) "
                    "to make network namespaces and host names")
    for ns in _namespaces():  # left behind by a killed run of this test
        found = OURS.match(ns)
        if found and not _alive(int(found["pid"])):
            _remove(ns)
    tag = secrets.token_hex(3)
    net = f"10.213.{secrets.randbelow(250) + 2}"
    ns = {role: f"rh-{tag}-{os.getpid()}-{role}" for role in ROLES}
    addr = {"m": f"{net}.1", "w1": f"{net}.2", "w2": f"{net}.3", "tb": f"{net}.4"}
    made: list[str] = []
    box = Hosts(ns, addr)
    try:
        try:
            _ip("netns", "add", ns["m"])
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"MULTI-HOST TEST NOT RUN: `ip netns add` is impossible here: {exc.stderr.strip()}")
        made.append(ns["m"])
        for role in ROLES[1:]:
            _ip("netns", "add", ns[role])
            made.append(ns[role])
        m = ns["m"]
        _ip("-n", m, "link", "add", "br0", "type", "bridge")
        _ip("-n", m, "addr", "add", f"{addr['m']}/24", "dev", "br0")
        _ip("-n", m, "link", "set", "br0", "up")
        for role in ROLES[1:]:  # a veth pair per host, made inside the namespaces (never in the root one)
            _ip("-n", m, "link", "add", f"v{role}", "type", "veth", "peer", "name", "eth0", "netns", ns[role])
            _ip("-n", m, "link", "set", f"v{role}", "master", "br0", "up")
            _ip("-n", ns[role], "addr", "add", f"{addr[role]}/24", "dev", "eth0")
            _ip("-n", ns[role], "link", "set", "eth0", "up")
        for role in ROLES:
            _ip("-n", ns[role], "link", "set", "lo", "up")
        yield box
    finally:
        for proc in box.procs:  # everything this test started, by PID
            if proc.poll() is None:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        for name in made:
            _remove(name)


def _testbed(hosts: Hosts, tmp: Path) -> tuple[Path, Path]:
    """The testbed in its own namespace, configured as the runner would for this scenario."""
    local = tmp / "testbed-scenario.yaml"
    local.write_text(SCENARIO.format(url="testbed"))
    cfg = tmp / "testbed.yaml"
    cfg.write_text(json.dumps(testbed_proc.testbed_config(load_scenario(local))))
    ledger, log = tmp / "ledger.jsonl", tmp / "testbed.log"
    hosts.start("tb", [sys.executable, "-m", "testbed", "--config", str(cfg), "--host", hosts.addr["tb"],
                       "--port", str(TESTBED_PORT), "--ledger", str(ledger)], tmp, log)
    deadline = time.monotonic() + 60
    while b"testbed listening" not in log.read_bytes():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    return ledger, log


def _run(hosts: Hosts, tmp: Path, name: str) -> tuple[subprocess.Popen[bytes], list[subprocess.Popen[bytes]], Path]:
    work = tmp / name
    work.mkdir()
    scenario = work / "s.yaml"
    scenario.write_text(SCENARIO.format(url=f"http://{hosts.addr['tb']}:{TESTBED_PORT}"))
    master = hosts.start("m", [*RUSHHOUR, "run", str(scenario), "--out", str(work / "runs"), "--no-report",
                               "--expect-workers", "2", "--master-bind", hosts.addr["m"],
                               "--master-port", str(MASTER_PORT), "--workers-wait", "60"], work, work / "master.log")
    # each worker also gets its own host name (a UTS namespace): its shard is another host's, aligned
    # through the wall clock and its measured offset to the master, as on separate machines
    workers = [hosts.start(role, ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', f"rh-{role}",
                                  *RUSHHOUR, "worker", "--master", f"{hosts.addr['m']}:{MASTER_PORT}",
                                  "--spool", str(work / f"spool-{role}")], work, work / f"{role}.log")
               for role in ("w1", "w2")]
    return master, workers, work


def _run_dir(work: Path) -> Path:
    found = sorted((work / "runs").glob("*/run.json"))
    assert found, (work / "master.log").read_text()
    return found[0].parent


def _spool(work: Path, role: str, run_dir: Path, pid: int) -> Path:
    return next((work / f"spool-{role}" / run_dir.name / "records").glob(f"*-{pid}.jsonl"))


def _requests(path: Path) -> int:
    return sum(1 for line in read_shard(path).lines if line.get("kind") == "request")


def _wait(proc: subprocess.Popen[bytes], timeout: float, log: Path) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not end within {timeout:.0f} s: {log.read_text()[-3000:]}")


def test_three_hosts_match_the_ledger_and_survive_a_dead_worker(hosts: Hosts, tmp_path: Path) -> None:
    ledger, _ = _testbed(hosts, tmp_path)

    # --- a whole run: shards come back on their own, counts equal the ledger's
    master, workers, work = _run(hosts, tmp_path, "whole")
    assert _wait(master, 180, work / "master.log") == 0, (work / "master.log").read_text()[-3000:]
    for proc in workers:
        _wait(proc, 30, work / "w1.log")
    run_dir = _run_dir(work)
    manifest = read_manifest(run_dir)
    shards = sorted((run_dir / "records").glob("*.jsonl"))
    assert len(shards) == 2
    for role, proc in zip(("w1", "w2"), workers, strict=True):
        local = _spool(work, role, run_dir, proc.pid)
        shipped = run_dir / "records" / local.name
        assert hashlib.sha256(shipped.read_bytes()).digest() == hashlib.sha256(local.read_bytes()).digest()
    log = [json.loads(line) for line in (run_dir / "workers.jsonl").read_text().splitlines()]
    assert sum(1 for e in log if e["event"] == "shard_complete" and e["ok"]) == 2
    workers_info = manifest.workers or {}
    assert workers_info["expected"] == 2 and len(workers_info["joined"]) == len(workers_info["finished"]) == 2
    assert sorted(workers_info["shards_complete"]) == [p.name for p in shards] and not workers_info["missing"]
    summary = run_audit(run_dir)
    v = summary.validity
    assert v.lost_workers == [] and v.remote_shards == 2
    # the offset to the master was measured over the bridge: half a round trip, well under a millisecond
    # on an idle machine; a busy one stretches it, so only its presence and a loose bound are asserted
    assert v.clock_offset_uncertainty_ms is not None and 0 < v.clock_offset_uncertainty_ms < 200
    cmp = compare_with_ledger(run_dir, summary, ledger)
    assert not cmp.count_problems(), cmp.count_problems()
    assert not cmp.mismatched, cmp.mismatched[:5]
    assert any(cls != "served" for counts in cmp.audit_counts.values() for cls in counts), cmp.audit_counts
    sent = sum(t.requests for t in summary.tiers)
    assert sent > 50 and sum(_requests(p) for p in shards) >= sent
    start = read_anchor(run_dir)
    assert start is not None
    assert manifest.ended_at is not None
    ended = dt.datetime.fromisoformat(manifest.ended_at).timestamp()
    print(f"\nwhole run: {sent} logical requests, classes per tier {cmp.audit_counts}; run.json ended "
          f"{ended - start[1] / 1e9 - RUN_S:+.1f} s after the schedule's end; arrival offset p50 "
          f"{cmp.arrival_offset_ms_p50:.2f} ms; clock-offset uncertainty {v.clock_offset_uncertainty_ms:.3f} ms")

    # --- a worker killed by PID mid-run: an invalid run that names it and keeps what it shipped
    master, workers, work = _run(hosts, tmp_path, "killed")
    deadline = time.monotonic() + 90
    while not list((work / "runs").glob("*/anchor.json")):
        assert time.monotonic() < deadline and master.poll() is None, (work / "master.log").read_text()[-3000:]
        time.sleep(0.1)
    run_dir = _run_dir(work)
    anchor = read_anchor(run_dir)
    assert anchor is not None
    time.sleep(max(0.0, anchor[1] / 1e9 + 5.0 - time.time()))  # 5 s into the schedule
    victim = workers[1]
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    assert _wait(master, RUN_S + 60, work / "master.log") == 0, (work / "master.log").read_text()[-3000:]
    ended_after_kill = time.time() - killed_at
    _wait(workers[0], 30, work / "w1.log")
    local = _spool(work, "w2", run_dir, victim.pid)
    shipped = run_dir / "records" / local.name
    kept, written = shipped.read_bytes(), local.read_bytes()
    assert written.startswith(kept), "the master's copy is not a prefix of what the worker wrote"
    assert _requests(shipped) > 0
    workers_info = read_manifest(run_dir).workers or {}
    assert len(workers_info["missing"]) == 1 and len(workers_info["finished"]) == 1
    assert workers_info["shards_incomplete"] == [shipped.name], workers_info
    summary = run_audit(run_dir)
    v = summary.validity
    assert not v.valid
    assert v.lost_workers == [shipped.stem] and shipped.stem.startswith("rh-w2-"), v.lost_workers
    assert any(shipped.stem in r for r in v.reasons), v.reasons
    attempts = sum(_requests(p) for p in (run_dir / "records").glob("*.jsonl"))
    assert attempts == _requests(shipped) + _requests(run_dir / "records" / _spool(
        work, "w1", run_dir, workers[0].pid).name)
    schedule_end = anchor[1] / 1e9 + RUN_S
    print(f"killed run: worker {shipped.stem} SIGKILLed 5 s in; the master kept {_requests(shipped)} of its "
          f"{_requests(local)} request lines ({len(written) - len(kept)} bytes not shipped yet); the run ended "
          f"{ended_after_kill:.1f} s after the kill ({time.time() - schedule_end:+.1f} s from the schedule's end, "
          f"audit included); reasons: {v.reasons}")


def test_workers_that_never_come_are_one_line_and_nothing_is_sent(tmp_path: Path) -> None:
    """On loopback (no namespaces needed): the master gives up after --workers-wait, in one line."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(url="http://127.0.0.1:9"))
    started = time.monotonic()
    out = subprocess.run([*RUSHHOUR, "run", str(scenario), "--out", str(tmp_path / "runs"), "--expect-workers", "2",
                          "--master-port", str(port), "--workers-wait", "3"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env=child_env())
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: 0 of 2 worker(s) joined within 3 s; start each with `rushhour worker --master "
                      f"127.0.0.1:{port}` (nothing was sent)"], out.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    assert read_manifest(run_dir).stop_reason == "startup_error"
    assert not list((run_dir / "records").glob("*.jsonl"))
    assert time.monotonic() - started < 60
