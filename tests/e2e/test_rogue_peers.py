"""Rogue peers on loopback against a real Locust master and real workers: none of them changes a run.

Each rogue knows Locust's wire format and every id it can read (``workers.jsonl``), never the run's
secret. Before the sealed transport (loadgen/engine/sealed.py) each of these changed the run: made-up
records and a gate from 1 to 0, a fake worker given the scenario, a forged "finished" ending an 8-s run
after 1.1 s, a forged refusal ending any run, forged budget asks and returns, a far-offset batch cutting
a real worker's lines, a malformed frame killing the receive loop, a 300 MB batch accepted, 2,000 shard
names held open, a fake master handed a worker's credential. Now the master drops them (counted in
run.json ``auth``), and the records equal the testbed's ledger; a worker refuses a fake master at once.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from support import cli_command

from rushhour.audit import run_audit
from rushhour.audit.ledger import compare_with_ledger
from rushhour.loadgen import runkey, testbed_proc
from rushhour.loadgen.ship import read_anchor
from rushhour.loadgen.testbed_proc import child_env
from rushhour.records.manifest import read_manifest
from rushhour.scenarios import load_scenario
from tests.e2e.rogue import LOCUST_VERSION, FakeMaster, Peer, forged, hello, plain

pytestmark = pytest.mark.e2e
RUSHHOUR = cli_command()
RUN_S = 8

SCENARIO = """
name: rogues
seed: 11
target:
  url: {url}
  profile: llm-d
  model: testbed-model
  testbed: {{preset: tiny, replicas: 2}}
  metrics: null
calibration: {{probes: 0}}
tiers:
  - {{name: interactive, priority: 100}}
personas:
  - kind: chat
    name: chat
    tier: interactive
    arrival: {{process: poisson, rate: 5}}
    turns: 1
    prompt_tokens: {{dist: uniform, low: 20, high: 100}}
    output_tokens: {{dist: uniform, low: 4, high: 8}}
phases:
  - {{name: main, duration: {run_s}s}}
drain_s: 2
budget: {{max_requests: 500}}
"""


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:  # everything this test started, by PID
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _start(procs: list[subprocess.Popen[bytes]], cmd: list[str], cwd: Path, log: Path,
           env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**env, "PYTHONUNBUFFERED": "1"})
    procs.append(proc)
    return proc


def _until(what: str, check: object, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: {log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.1)


def _master(procs: list[subprocess.Popen[bytes]], tmp: Path, scenario: Path, port: int, env: dict[str, str],
            workers_wait_s: int) -> subprocess.Popen[bytes]:
    """``rushhour run --expect-workers 1`` on ``port``, once it waits for its worker (log: master.log)."""
    log = tmp / "master.log"
    master = _start(procs, [*RUSHHOUR, "run", str(scenario), "--out", str(tmp / "runs"), "--no-report",
                            "--expect-workers", "1", "--master-port", str(port), "--workers-wait", str(workers_wait_s)],
                    tmp, log, env)
    _until("master waiting", lambda: b"waiting for 1 worker" in log.read_bytes(), 60, log)
    return master


def _testbed(procs: list[subprocess.Popen[bytes]], tmp: Path) -> tuple[str, Path]:
    local = tmp / "testbed-scenario.yaml"
    local.write_text(SCENARIO.format(url="testbed", run_s=RUN_S))
    cfg = tmp / "testbed.yaml"
    cfg.write_text(json.dumps(testbed_proc.testbed_config(load_scenario(local))))
    port, ledger, log = _port(), tmp / "ledger.jsonl", tmp / "testbed.log"
    _start(procs, [sys.executable, "-m", "rushhour.testbed", "--config", str(cfg), "--host", "127.0.0.1",
                   "--port", str(port), "--ledger", str(ledger)], tmp, log, child_env())
    _until("testbed start", lambda: b"testbed listening" in log.read_bytes(), 60, log)
    return f"http://127.0.0.1:{port}", ledger


def _worker_id(run_dir: Path) -> str:
    for line in (run_dir / "workers.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("event") == "worker_state":
            return str(entry["worker"])
    raise AssertionError("no worker in workers.jsonl")


@pytest.mark.serial  # its verdict (a valid run) rests on the generator's timing, as any small run's does
def test_rogues_on_the_master_port_change_nothing(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    url, ledger = _testbed(procs, tmp_path)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(url=url, run_s=RUN_S))
    port = _port()
    secret = runkey.new_secret()
    env = child_env({runkey.SECRET_ENV: secret, runkey.TARGETS_ENV: url})
    mlog = tmp_path / "master.log"
    master = _master(procs, tmp_path, scenario, port, env, workers_wait_s=60)

    # a fake worker joins first, in Locust's own words and in sealed-looking ones
    fake = Peer(port, "rogue-fake-worker")
    fake.send(plain("client_ready", LOCUST_VERSION, fake.identity), hello(fake.identity),
              forged("client_ready", LOCUST_VERSION, fake.identity))
    fake.drain(1.0)
    wlog = tmp_path / "worker.log"
    worker = _start(procs, [*RUSHHOUR, "worker", "--master", f"127.0.0.1:{port}", "--spool", str(tmp_path / "spool"),
                            "--target", url], tmp_path, wlog, env)
    _until("anchor", lambda: list((tmp_path / "runs").glob("*/anchor.json")), 90, mlog)
    run_dir = next((tmp_path / "runs").iterdir())
    anchor = read_anchor(run_dir)
    assert anchor is not None
    time.sleep(max(0.0, anchor[1] / 1e9 + 1.0 - time.time()))  # 1 s into the schedule
    real = _worker_id(run_dir)
    shard = f"{socket.gethostname()}-{worker.pid}-w0.jsonl"
    made_up = b"".join(json.dumps({"kind": "request", "schema": 1, "run_id": run_dir.name, "seq": n,
                                   "tier": "interactive", "status": 200, "complete": True}).encode() + b"\n"
                       for n in range(2000))

    injector = Peer(port, "rogue-injector")  # never joined: thousands of made-up records
    injector.send(plain("rh_shard", {"name": "rogue.jsonl", "offset": 0, "data": made_up}, "rogue-injector"),
                  forged("rh_shard", {"name": "rogue.jsonl", "offset": 0, "data": made_up}, real))
    forger = Peer(port, "rogue-forger")  # under the real worker's id, read from workers.jsonl
    for kind, data in (("rh_finished", {"pid": 1}), ("rh_refused", {"who": real, "reason": "forged"}),
                       ("rh_budget_ask", {"id": 1, "needs": {"run": {"requests": 400}}, "units": {}}),
                       ("rh_budget_return", {"round": None, "returned": {"run": {"requests": 100}}, "final": True}),
                       ("rh_shard", {"name": shard, "offset": 10**9, "data": b"far\n"})):
        forger.send(plain(kind, data, real), forged(kind, data, real, seq=10**6))
    twin = Peer(port, real)  # the real worker's connection identity itself: ZeroMQ keeps the first
    twin.send(plain("rh_finished", {"pid": 1}, real), forged("rh_finished", {"pid": 1}, real))
    junk = Peer(port, "rogue-malformed")
    junk.send(b"\xff\x00 not msgpack", msgpack_tuple(2), b"", b"RH1M\xc1", b"RH1H" + b"\x93\x01\x02\x03",
              hello("somebody-else"))
    junk.send_multipart([b"a", b"b"])
    big = Peer(port, "rogue-oversized")  # 8 MiB: above the master's frame limit (4 MiB), refused by ZeroMQ
    big.send(plain("rh_shard", {"name": "big.jsonl", "offset": 0, "data": b"x" * (8 << 20)}, real))
    names = Peer(port, "rogue-names")
    names.send(*(plain("rh_shard", {"name": f"n{n}.jsonl", "offset": 0, "data": b"{}\n"}, real) for n in range(2000)))
    rogue_peers = (injector, forger, twin, junk, big, names)

    code = master.wait(RUN_S + 90)
    text = mlog.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert worker.wait(30) == 0, wlog.read_text()[-3000:]
    fake.drain(0.5)
    for peer in (fake, *rogue_peers):
        peer.close()

    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == "completed"
    assert manifest.ended_at is not None
    import datetime as dt

    ran_s = dt.datetime.fromisoformat(manifest.ended_at).timestamp() - anchor[1] / 1e9
    assert ran_s >= RUN_S - 0.5, ran_s  # not ended by the forged "finished" (before: 1.1 s of 8)
    # only the real worker's shard, whole, equal to its own copy
    assert sorted(p.name for p in (run_dir / "records").glob("*.jsonl")) == [shard]
    local = tmp_path / "spool" / run_dir.name / "records" / shard
    assert hashlib.sha256((run_dir / "records" / shard).read_bytes()).digest() == hashlib.sha256(
        local.read_bytes()).digest()
    workers = manifest.workers or {}
    assert workers["joined"] == [real] and workers["finished"] == [real] and workers["shards_complete"] == [shard]
    clock = workers["clocks"][real]  # measured by the master on its own clock, never the worker's word
    assert clock["rounds"] == 5 and clock["uncertainty_ns"] > 0 and isinstance(clock["offset_ns"], int), clock
    auth = manifest.auth or {}
    assert auth["authenticated_workers"] == [real], auth
    assert auth["rejected_total"] >= 2 * 5 + 2 + 2 + 2000, auth
    for who in ("rogue-fake-worker", "rogue-injector", "rogue-forger", "rogue-malformed", "rogue-names"):
        assert who in auth["rejected_from"], (who, auth)
    assert {"untagged", "bad_tag", "malformed"} <= set(auth["rejected"]), auth
    # the fake worker was given nothing but a challenge: no ack, no spawn, no scenario or target
    assert all(frame.startswith(b"RH1C") for frame in fake.got), fake.got[:3]
    assert not any(url.encode() in frame or b"rh_scenario_json" in frame for frame in fake.got)
    assert "Traceback" not in text and "Traceback" not in (run_dir / "locust.log").read_text(errors="replace")
    assert "dropped 1 untagged frame(s) on the master port" in (run_dir / "locust.log").read_text(errors="replace")
    # the secret is in no file of the run, no log and no local copy (nor on any command line: env only)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not [p for p in files if secret.encode() in p.read_bytes()]
    # the records are what the testbed saw, and the run is valid
    summary = run_audit(run_dir)
    assert summary.validity.valid, summary.validity.reasons
    cmp = compare_with_ledger(run_dir, summary, ledger)
    assert not cmp.count_problems() and not cmp.mismatched, cmp.count_problems()
    sent = sum(t.requests for t in summary.tiers)
    assert sent > 20
    budget = (manifest.budget_usage or {}).get("master") or {}
    print(f"\nrogues: {auth['rejected_total']} frames dropped {auth['rejected']}; {sent} requests, equal to the "
          f"ledger; ran {ran_s:.1f} s of {RUN_S}; budget master asks {budget.get('asks')}")


def msgpack_tuple(n: int) -> bytes:
    import msgpack

    return msgpack.packb(tuple(range(n)))


def test_a_fake_sole_worker_gets_nothing_and_no_run(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(url="http://127.0.0.1:9", run_s=RUN_S))
    port = _port()
    env = child_env({runkey.SECRET_ENV: runkey.new_secret()})
    mlog = tmp_path / "master.log"
    master = _master(procs, tmp_path, scenario, port, env, workers_wait_s=6)
    fake = Peer(port, "rogue-sole-worker")
    for _ in range(3):
        fake.send(plain("client_ready", LOCUST_VERSION, fake.identity), hello(fake.identity),
                  forged("client_ready", LOCUST_VERSION, fake.identity))
        fake.drain(1.0)
    code = master.wait(60)
    fake.drain(0.2)
    fake.close()
    text = mlog.read_text(errors="replace")
    assert code == 2, text
    assert "0 of 1 worker(s) joined" in text and "Traceback" not in text, text
    assert all(frame.startswith(b"RH1C") for frame in fake.got), fake.got[:3]
    run_dir = next((tmp_path / "runs").iterdir())
    assert not list((run_dir / "records").glob("*.jsonl"))
    assert read_manifest(run_dir).stop_reason == "startup_error"


def test_forged_refusal_and_finished_do_not_end_a_local_processes_run(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(url="testbed", run_s=RUN_S))
    mlog = tmp_path / "run.log"
    run = _start(procs, [*RUSHHOUR, "run", str(scenario), "--out", str(tmp_path / "runs"), "--no-report",
                         "--processes", "2"], tmp_path, mlog, child_env())
    _until("anchor", lambda: list((tmp_path / "runs").glob("*/anchor.json")), 90, mlog)
    run_dir = next((tmp_path / "runs").iterdir())
    cmd = read_manifest(run_dir).locust_command
    port = int(cmd[cmd.index("--master-bind-port") + 1])
    anchor = read_anchor(run_dir)
    assert anchor is not None
    time.sleep(max(0.0, anchor[1] / 1e9 + 1.0 - time.time()))
    rogue = Peer(port, "rogue-local")
    for node in ("local-a", "local-b"):  # before: a refusal ended the run, whoever sent it
        rogue.send(plain("rh_refused", {"who": node, "reason": "forged"}, node), plain("rh_finished", {}, node),
                   forged("rh_refused", {"who": node, "reason": "forged"}, node))
    assert run.wait(RUN_S + 60) == 0, mlog.read_text()[-3000:]
    rogue.close()
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == "completed" and manifest.error is None
    assert manifest.ended_at is not None
    import datetime as dt

    assert dt.datetime.fromisoformat(manifest.ended_at).timestamp() - anchor[1] / 1e9 >= RUN_S - 0.5
    auth = manifest.auth or {}
    assert auth.get("rejected_total", 0) >= 6 and "rogue-local" in auth["rejected_from"], auth
    assert len(auth["authenticated_workers"]) == 2


class _Capture(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str]]] = []

    def do_POST(self) -> None:
        _Capture.seen.append((self.path, self.headers.get("Authorization", "")))
        self.send_response(500)
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def capture() -> Iterator[str]:
    _Capture.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(5)


CREDENTIAL_SCENARIO = """
name: creds
target: {{url: "{url}", profile: openai, model: m, metrics: null}}
calibration: {{probes: 0}}
tiers:
  - {{name: interactive, priority: 100, credential: env:RH_TEST_KEY}}
personas:
  - {{kind: chat, name: chat, tier: interactive, arrival: {{process: poisson, rate: 5}}, turns: 1}}
phases:
  - {{name: main, duration: 4s}}
drain_s: 1
"""


@pytest.mark.parametrize("mode", ["plain_locust", "wrong_secret"])
def test_a_worker_refuses_a_fake_master_and_sends_no_credential(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]], capture: str, mode: str) -> None:
    port = _port()
    (tmp_path / "creds.yaml").write_text(CREDENTIAL_SCENARIO.format(url=capture))
    resolved = load_scenario(tmp_path / "creds.yaml").model_dump(mode="json")
    now = time.time_ns()  # a spawn a plain Locust master would send: its target, its run folder, an anchor
    spawn = {"host": capture, "stop_timeout": 0, "timestamp": time.time(), "user_classes_count": {"RushhourDriver": 1},
             "parsed_options": {"rh_target": capture, "rh_run_id": "../../escaped", "rh_ship": "1",
                                "rh_run_dir": str(tmp_path / "escaped"), "rh_workers": "1",
                                "rh_mono_anchor_ns": str(time.monotonic_ns()), "rh_wall_anchor_ns": str(now),
                                "rh_anchor_host": socket.gethostname(), "rh_scenario_json": json.dumps(resolved)}}
    fake = FakeMaster(port, mode, spawn)
    wlog = tmp_path / "worker.log"
    env = child_env({runkey.SECRET_ENV: runkey.new_secret(), "RH_TEST_KEY": "sk-rogue-test-0123456789"})
    try:
        worker = _start(procs, [*RUSHHOUR, "worker", "--master", f"127.0.0.1:{port}", "--spool",
                                str(tmp_path / "spool"), "--target", "http://127.0.0.1:9"], tmp_path, wlog, env)
        code = worker.wait(30)
    finally:
        fake.close()
    text = wlog.read_text(errors="replace")
    assert code == 2, text
    assert "refusing the master at 127.0.0.1:" in text and "Traceback" not in text, text
    assert _Capture.seen == []  # before: the worker sent its env: key as a Bearer header to the fake master's URL
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()
    assert all(f.startswith(b"RH1H") for f in fake.frames), fake.frames[:3]  # never a Locust message
    assert b"sk-rogue-test" not in b"".join(fake.frames)


def test_a_worker_refuses_a_target_outside_its_allow_list(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]], capture: str) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(CREDENTIAL_SCENARIO.format(url=capture))
    port = _port()
    env = child_env({runkey.SECRET_ENV: runkey.new_secret(), "RH_TEST_KEY": "sk-rogue-test-0123456789"})
    mlog, wlog = tmp_path / "master.log", tmp_path / "worker.log"
    master = _master(procs, tmp_path, scenario, port, env, workers_wait_s=60)
    worker = _start(procs, [*RUSHHOUR, "worker", "--master", f"127.0.0.1:{port}", "--spool", str(tmp_path / "spool"),
                            "--target", "http://127.0.0.1:9"], tmp_path, wlog, env)
    assert master.wait(60) == 2, mlog.read_text()[-3000:]
    worker.wait(30)
    text = mlog.read_text(errors="replace")
    assert "not in this worker's allow-list" in text and "Traceback" not in text, text
    assert _Capture.seen == []
