"""`locust -f` on a plain locustfile with rushhour's public users writes a run folder the audit reads.

Real processes: a testbed on loopback, Locust standalone and as master + 2 workers; the audit's
per-tier classes must equal the testbed ledger's, and ``rushhour gate`` judges the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rushhour.audit.ledger import compare_with_ledger
from rushhour.audit.summary import Summary
from rushhour.loadgen import runkey
from rushhour.records.manifest import read_manifest
from rushhour.records.record import read_shard, shard_paths

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

LOCUSTFILE = '''
from locust import constant
from rushhour.locust import AgentUser, ChatUser, ReplayUser


class Chat(ChatUser):
    wait_time = constant(0.2)
    tier, priority, tenants = "interactive", 100, ["team-a", "team-b"]
    slo = {"ttft_ms": {"p90": 5000}}
    turns = 2
    think_time_s = 0.2
    system_prompt_tokens = 64
    prompt_tokens = {"dist": "uniform", "low": 20, "high": 200}
    output_tokens = 8


class Agent(AgentUser):
    tier, priority, objective = "batch", -1, "batch-sheddable"
    steps = 2
    fanout = 2
    tool_time_s = 0.1
    shared_context_tokens = 256
    task_context_tokens = 64
    append_tokens = 32
    output_tokens = 8
'''

REPLAY = '''

class Replay(ReplayUser):
    tier, priority, objective = "batch", -1, "batch-sheddable"
    trace = "AzureLLMInferenceTrace_conv.csv"
    time_scale = 20.0
    limit = 15
    max_output_tokens = 8
    max_prompt_tokens = 256
'''


@pytest.fixture
def testbed(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port_file, ledger = tmp_path / "port", tmp_path / "ledger.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rushhour.testbed", "--port", "0", "--port-file", str(port_file),
         "--ledger", str(ledger), "--preset", "tiny", "--replicas", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        for _ in range(400):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{int(port_file.read_text())}", ledger
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def _locust(locustfile: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(locustfile), "--only-summary", *args]


def _audit_matches_ledger(run_dir: Path, ledger: Path) -> Summary:
    audit = subprocess.run([sys.executable, "-m", "rushhour.cli", "audit", str(run_dir)], cwd=REPO, env=ENV,
                           capture_output=True, text=True, timeout=300)
    # the audit's exit code is its verdict (2: invalid or inconclusive, e.g. a generator starved on a busy machine)
    assert audit.returncode in (0, 1, 2) and "Traceback" not in audit.stderr, audit.stderr[-2000:]
    summary = Summary.model_validate_json((run_dir / "summary.json").read_text())
    comparison = compare_with_ledger(run_dir, summary, ledger)
    assert comparison.count_problems() == [] and comparison.mismatched == []
    assert comparison.unmatched_ledger == 0, "the server saw requests no record holds"
    return summary


def test_headless_locustfile_writes_a_run_the_audit_matches_to_the_ledger(
        tmp_path: Path, testbed: tuple[str, Path]) -> None:
    url, ledger = testbed
    locustfile = tmp_path / "locustfile.py"
    # the run's knobs, set alike on every class: two idle probes before the clock starts (inflation's baseline),
    # and the testbed's /metrics scraped every 0.5 s
    locustfile.write_text(LOCUSTFILE + REPLAY + "\nChat.calibration = Agent.calibration = Replay.calibration = "
                          "{'probes': 2, 'prompt_tokens': [64]}\n"
                          "Chat.metrics = Agent.metrics = Replay.metrics = {'interval_s': 0.5}\n")
    run_dir = tmp_path / "run"
    run = subprocess.run(_locust(locustfile, "--headless", "-u", "6", "-r", "6", "-t", "6s", "--stop-timeout", "5",
                                 "--host", url, "--rh-run-dir", str(run_dir)),
                         cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode in (0, 1), run.stderr[-2000:]  # 1: Locust counts unserved attempts as failures
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == "completed" and manifest.extra.get("locust_native") is True
    assert manifest.scenario is not None
    assert {p["name"]: p["kind"] for p in manifest.scenario["personas"]} == {
        "Chat": "chat", "Agent": "agent_swarm", "Replay": "trace_replay"}
    shard = read_shard(next(p for p in shard_paths(run_dir) if not p.stem.endswith("-calibration")))
    events = [line["name"] for line in shard.lines if line["kind"] == "event"]
    assert events[0] == "worker_start" and events[-1] == "worker_stop"
    requests = [line for line in shard.lines if line["kind"] == "request"]
    assert {r["persona"] for r in requests} == {"Chat", "Agent", "Replay"}
    assert any(r["fanout_index"] == 1 for r in requests), "the agents fanned out"
    assert manifest.calibration is not None and manifest.calibration["served"] == 2, manifest.calibration
    probes = [p for p in shard_paths(run_dir) if p.stem.endswith("-calibration")]
    assert len(probes) == 1 and all(r["persona"] == "calibration" for r in read_shard(probes[0]).lines
                                    if r["kind"] == "request")
    scrapes = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # every 0.5 s over 6 s of load: ~12 when the machine is quiet; the scraper child's own start (imports) can take
    # seconds under a loaded parallel pass, so two scrapes with samples prove it ran during the test
    assert sum(1 for x in scrapes if x.get("samples")) >= 2, scrapes[:3]
    summary = _audit_matches_ledger(run_dir, ledger)
    tiers = {t.name: t for t in summary.tiers}
    assert set(tiers) == {"interactive", "batch"} and tiers["interactive"].requests > 10
    assert summary.timeline is not None and summary.timeline.server, "the audit read no server metric"
    assert "calibration" in tiers["interactive"].inflation.source, tiers["interactive"].inflation
    gate = subprocess.run([sys.executable, "-m", "rushhour.cli", "gate", str(run_dir)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120)
    # judged as the audit judged (2 only when the run was invalid or a check inconclusive), not an error
    assert gate.returncode == summary.exit_code, gate.stdout[-2000:] + gate.stderr[-2000:]
    tenants = {json.loads(x)["tenant"] for x in ledger.read_text().splitlines() if json.loads(x)["priority"] == 100}
    assert tenants == {"team-a", "team-b"}


def test_master_and_two_workers_write_one_run(tmp_path: Path, testbed: tuple[str, Path]) -> None:
    """One run from three processes, and one budget for it: the master leases the cap to its workers."""
    url, ledger = testbed
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(LOCUSTFILE + f"\nChat.budget = Agent.budget = {{'max_requests': {CAP}}}\n")
    run_dir = tmp_path / "run"
    port = str(_free_port())  # never a pid-derived port: parallel test workers (xdist) would share its range
    env = {**ENV, runkey.SECRET_ENV: runkey.new_secret()}  # a shared secret: every frame sealed
    # -t 90s: the budget, reached in about a second, ends the test (the users no longer idle until -t)
    master = subprocess.Popen(
        _locust(locustfile, "--master", "--headless", "--expect-workers", "2", "-u", "6", "-r", "6", "-t", "90s",
                "--stop-timeout", "5", "--host", url, "--rh-run-dir", str(run_dir), "--master-bind-port", port),
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers = [subprocess.Popen(_locust(locustfile, "--worker", "--master-port", port), cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        _, err = master.communicate(timeout=120)
        for w in workers:
            w.wait(timeout=60)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
                p.wait(timeout=10)
    assert master.returncode in (0, 1), err[-2000:]
    manifest = read_manifest(run_dir)
    assert manifest.processes == 2 and len(shard_paths(run_dir)) == 2
    assert {read_shard(p).header["run_id"] for p in shard_paths(run_dir)} == {manifest.run_id}
    # the cap holds for the run, not per worker: the testbed saw exactly CAP requests (equal shares or two
    # whole budgets would not add up to it, the load asks for far more) -- short of it only when the master's
    # account says why (a worker lost, or a reclaim left unanswered for 15 s on a starved machine)
    usage = manifest.budget_usage
    assert usage is not None and usage["enforcement"] == "one budget, leased by the master", usage
    seen = len(ledger.read_text().splitlines())
    excused = usage["master"]["lost"] + usage["master"]["round_timeouts"]
    # issue #15: one run in four ended at 24 with nothing to excuse it (a grant read right before the "reached"
    # for the run refused the send it was for); a grant is now reserved for its send as it is read
    assert seen == usage["run"]["requests"] and seen <= CAP, (seen, usage)
    assert seen == CAP or (excused and seen < CAP), (seen, usage)
    assert len(usage["processes"]) == 2 and usage["master"]["asks"] >= 2
    records = [line for p in shard_paths(run_dir) for line in read_shard(p).lines]
    assert any(line["kind"] == "event" and line["name"] == "budget_reached" for line in records)
    assert manifest.stop_reason == "budget"  # the budget, not the plan, ended the sending: run.json says so
    assert manifest.duration_s is not None and manifest.duration_s < 80, manifest.duration_s  # not -t's 90 s
    _audit_matches_ledger(run_dir, ledger)


def test_a_worker_held_5_s_is_not_called_missing_by_a_users_own_master(tmp_path: Path,
                                                                         testbed: tuple[str, Path]) -> None:
    """A worker whose process is held 5 s (a loaded machine) is waited for, as under `rushhour run --processes`.

    Locust calls a worker missing after 3 missed 1-s heartbeats and stops the test once its last worker is:
    before, a user's own master with two workers on a busy machine ended its test 5 s in, having sent nothing
    (CI39). A stopped worker here misses 5; the test must run its 14 s and the worker send again after it."""
    url, ledger = testbed
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(LOCUSTFILE)
    run_dir = tmp_path / "run"
    port = str(_free_port())
    env = {**ENV, runkey.SECRET_ENV: runkey.new_secret()}
    master = subprocess.Popen(
        _locust(locustfile, "--master", "--headless", "--expect-workers", "1", "-u", "2", "-r", "2", "-t", "14s",
                "--stop-timeout", "5", "--host", url, "--rh-run-dir", str(run_dir), "--master-bind-port", port),
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    worker = subprocess.Popen(_locust(locustfile, "--worker", "--master-port", port), cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (ledger.exists() and ledger.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ledger.read_text().strip(), "the load never started"
        os.kill(worker.pid, signal.SIGSTOP)
        time.sleep(5)
        held_until = len(ledger.read_text().splitlines())
        os.kill(worker.pid, signal.SIGCONT)
        _, err = master.communicate(timeout=90)
        worker.wait(timeout=60)
    finally:
        for p in (master, worker):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                os.kill(p.pid, signal.SIGTERM)
                p.wait(timeout=10)
    assert master.returncode in (0, 1), err[-2000:]
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == "completed", (manifest.stop_reason, err[-2000:])  # not "interrupted" at ~4 s
    assert len(ledger.read_text().splitlines()) > held_until  # the worker sent again once it ran


CAP = 25


def test_a_spent_budget_ends_a_standalone_test_before_its_run_time(tmp_path: Path, testbed: tuple[str, Path]) -> None:
    """The users would idle until -t once the budget is spent: the test ends when the last request is back."""
    url, ledger = testbed
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(LOCUSTFILE + "\nChat.budget = Agent.budget = {'max_requests': 12}\n")
    run_dir = tmp_path / "run"
    run = subprocess.run(_locust(locustfile, "--headless", "-u", "4", "-r", "4", "-t", "90s", "--host", url,
                                 "--rh-run-dir", str(run_dir)),
                         cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=150)
    assert run.returncode in (0, 1), run.stderr[-2000:]
    manifest = read_manifest(run_dir)
    assert manifest.stop_reason == "budget", manifest.stop_reason  # not 'interrupted': it ended before -t
    assert manifest.duration_s is not None and manifest.duration_s < 80, manifest.duration_s  # not -t's 90 s
    assert len(ledger.read_text().splitlines()) == 12  # every request it sent came back before the end
    records = [line for p in shard_paths(run_dir) for line in read_shard(p).lines if line["kind"] == "request"]
    assert not any(r.get("cancelled") for r in records), "the end cut a request off"


RESILIENT = '''
from locust import constant
from rushhour.locust import ChatUser


class Chat(ChatUser):
    wait_time = constant(0.1)
    turns, think_time_s, system_prompt_tokens, prompt_tokens, output_tokens = 1, 0.1, 0, 30, 4
    retries = {{"on": ["transport"], "max_attempts": 2, "backoff": "fixed", "base_s": 0.05}}
    fallback = [{{"name": "backup", "url": "{url}"}}]
    breaker = {{"fail_max": 3, "reset_timeout_s": 30}}
    control = {{"share": 0.3}}  # equal-priority twins of 30 % of the requests
'''


def test_retries_fallback_and_breaker_as_in_a_scenario(tmp_path: Path, testbed: tuple[str, Path]) -> None:
    """The primary refuses connections: each request is retried once, then falls back to the testbed; the
    primary's breaker opens, after which requests go to the fallback at once (``breaker_open``); 30 % of the
    requests have an equal-priority twin (the priority control), which the audit sets beside the tier."""
    url, ledger = testbed
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(RESILIENT.format(url=url))
    run_dir = tmp_path / "run"
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    # 6 s: beside parallel test workers a 3-s run sent 4 requests to the fallback
    run = subprocess.run(_locust(locustfile, "--headless", "-u", "3", "-r", "3", "-t", "6s", "--stop-timeout", "5",
                                 "--host", dead, "--rh-run-dir", str(run_dir)),
                         cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode in (0, 1), run.stderr[-2000:]
    manifest = read_manifest(run_dir)
    assert manifest.scenario is not None and manifest.scenario["resilience"]["fallback"][0]["name"] == "backup"
    lines = [line for p in shard_paths(run_dir) for line in read_shard(p).lines]
    requests = [line for line in lines if line["kind"] == "request"]
    primary = [r for r in requests if r["route"] == "primary"]
    assert any(r["attempt"] == 2 and r["retry_reason"] for r in primary), "no retry on the primary"
    failed = [r for r in primary if r["status"] == 0 and r["reason"] != "breaker_open"]
    assert len(failed) >= 3 and all(r["transport_error"] for r in failed)  # fail_max 3 opened the breaker
    assert any(r["reason"] == "breaker_open" for r in primary), "the open breaker refused nothing"
    assert any(r["twin_of"] for r in requests), "the priority control sent no twin"
    backup = [r for r in requests if r["route"] == "backup" and r["status"] == 200]
    assert len(backup) >= 5
    breaker = [line for line in lines if line["kind"] == "breaker"]
    assert [(b["route"], b["state"]) for b in breaker][:1] == [("primary", "open")]
    summary = _audit_matches_ledger(run_dir, ledger)
    tier = summary.tiers[0]
    assert tier.routes.get("backup", 0) >= 5 and tier.by_class.get("served", 0) == tier.routes["backup"]
    assert tier.retry_amplification > 1.0
    assert tier.priority_effect is not None and tier.priority_effect.pairs > 0, tier.priority_effect


DATASETS = '''
from locust import constant
from rushhour.locust import AgentUser, ChatUser


class Chat(ChatUser):
    wait_time = constant(0.2)
    tier, priority = "interactive", 100
    dataset = {"path": "convs.jsonl", "max_turns": 2}   # next to this locustfile
    think_time_s = 0.1
    system_prompt_tokens = 0
    output_tokens = 8


class Agent(AgentUser):
    tier, priority, objective = "batch", -1, "batch-sheddable"
    dataset = "chat-mini.jsonl"                          # a shipped dataset
    subagents = {"probability": 1.0, "fan_out": 2, "steps": 1, "prefix_tokens": 64}
    steps, fanout, tool_time_s = 2, 1, 0.1
    shared_context_tokens, append_tokens, output_tokens = 128, 16, 8
'''


def test_dataset_and_subagent_knobs_run_and_match_the_ledger(tmp_path: Path, testbed: tuple[str, Path]) -> None:
    from rushhour.scenarios.distributions import BUNDLED_DATASETS

    url, ledger = testbed
    here = tmp_path / "lf"  # Locust runs elsewhere: the dataset is found next to the locustfile
    here.mkdir()
    (here / "locustfile.py").write_text(DATASETS)
    (here / "convs.jsonl").write_bytes((BUNDLED_DATASETS / "chat-mini.jsonl").read_bytes())
    run_dir = tmp_path / "run"
    run = subprocess.run(_locust(here / "locustfile.py", "--headless", "-u", "4", "-r", "4", "-t", "8s",
                                 "--stop-timeout", "5", "--host", url, "--rh-run-dir", str(run_dir)),
                         cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode in (0, 1), run.stderr[-2000:]
    manifest = read_manifest(run_dir)
    assert manifest.scenario is not None
    datasets = {p["name"]: p["dataset"]["path"] for p in manifest.scenario["personas"]}
    assert datasets == {"Chat": str(here / "convs.jsonl"), "Agent": str(BUNDLED_DATASETS / "chat-mini.jsonl")}
    requests = [line for p in shard_paths(run_dir) for line in read_shard(p).lines if line["kind"] == "request"]
    assert any(r["persona"] == "Agent" and r["parent_id"] for r in requests), "no sub-agent call was sent"
    assert any(r["persona"] == "Chat" and r["step"] == 1 for r in requests), "no dataset session had a 2nd turn"
    _audit_matches_ledger(run_dir, ledger)


@pytest.mark.parametrize(("old", "new", "says"), [
    ("system_prompt_tokens = 64", "system_prompt_tokens = -5", "rushhour: Chat.system_prompt_tokens: "),
    ("tool_time_s = 0.1", "tool_time_s = 0.1\n    dataset = 'nowhere.jsonl'",
     "rushhour: Agent.dataset: 'nowhere.jsonl' "),
    ("tool_time_s = 0.1", "tool_time_s = 0.1\n    subagents = {'probability': 2}",
     "rushhour: Agent.subagents.probability: "),
    ("system_prompt_tokens = 64", "system_prompt_tokens = 64\n    retries = {'max_attempts': 0}",
     "rushhour: Chat.retries.max_attempts: "),
    ("tool_time_s = 0.1", "tool_time_s = 0.1\n    budget = {'max_cost_usd': 1}",
     "rushhour: Agent.budget = {'max_cost_usd': 1} but Chat.budget = None: "),
])
def test_a_bad_knob_is_one_line_before_any_load(tmp_path: Path, old: str, new: str, says: str) -> None:
    locustfile = tmp_path / "locustfile.py"
    assert old in LOCUSTFILE
    locustfile.write_text(LOCUSTFILE.replace(old, new))
    run = subprocess.run(_locust(locustfile, "--headless", "-u", "1", "-t", "2s", "--host", "http://127.0.0.1:9"),
                         cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(says), run.stderr[-1000:]
    assert not (tmp_path / "runs").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_web_ui_runs_two_tests_into_two_run_folders(tmp_path: Path, testbed: tuple[str, Path]) -> None:
    import urllib.parse
    import urllib.request

    url, ledger = testbed
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(LOCUSTFILE)
    run_dir, web = tmp_path / "run", _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(locustfile), "--web-host", "127.0.0.1", "--web-port", str(web),
         "--host", url, "--rh-run-dir", str(run_dir)],
        cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{web}"

    def call(path: str, form: dict[str, str] | None = None) -> None:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        urllib.request.urlopen(urllib.request.Request(base + path, data=data), timeout=10).read()

    try:
        for _ in range(200):
            try:
                call("/")
                break
            except OSError:
                time.sleep(0.1)
        for _ in range(2):  # two tests from the UI, as a user clicks start, stop, new test
            call("/swarm", {"user_count": "4", "spawn_rate": "4", "host": url})
            time.sleep(4)
            call("/stop", {})
            time.sleep(2)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err[-2000:]
    first, second = read_manifest(run_dir), read_manifest(Path(f"{run_dir}-2"))
    assert first.run_id != second.run_id and second.run_id == f"{first.run_id}-2"
    assert first.stop_reason == second.stop_reason == "completed"  # a web-UI test ends when its user stops it
    assert first.duration_s is not None and 3 < first.duration_s < 20, "the anchor is the test's start"
    for folder in (run_dir, Path(f"{run_dir}-2")):
        audit = subprocess.run([sys.executable, "-m", "rushhour.cli", "audit", str(folder)], cwd=REPO, env=ENV,
                               capture_output=True, text=True, timeout=300)
        assert audit.returncode in (0, 1, 2) and "Traceback" not in audit.stderr, audit.stderr[-2000:]
        assert (folder / "summary.json").exists()
    # together the two folders hold every request the testbed saw, each once
    records = {line["request_id"]: line for folder in (run_dir, Path(f"{run_dir}-2")) for p in shard_paths(folder)
               for line in read_shard(p).lines if line["kind"] == "request" and not line["not_sent"]}
    seen = {json.loads(x)["request_id"] for x in ledger.read_text().splitlines()}
    assert seen <= set(records) and records
    # the stop cancels requests in flight: one cancelled before the server read it has no ledger line
    unseen = [records[i] for i in set(records) - seen]
    assert all(r["cancelled"] and r["status"] == 0 and r["first_token_ns"] is None for r in unseen), unseen


def test_a_headless_run_stopped_before_its_run_time_is_interrupted(tmp_path: Path, testbed: tuple[str, Path]) -> None:
    # the other side of "completed": a run stopped well before -t did not run its plan (timed from Locust's
    # start, so a stop 10 s into 30 s stays early however late test_start fired)
    url, _ = testbed
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(LOCUSTFILE)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_locust(locustfile, "--headless", "-u", "2", "-r", "2", "-t", "30s", "--stop-timeout",
                                    "3", "--host", url, "--rh-run-dir", str(run_dir)),
                            cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(300):  # the test has started: run.json is written at test_start
            if (run_dir / "run.json").exists():
                break
            time.sleep(0.1)
        time.sleep(8)
        # SIGTERM: Locust's own stop (SIGINT is ignored in the children of pytest-xdist's workers)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    manifest = read_manifest(run_dir)
    assert manifest.ended_at is not None, err[-2000:]
    assert manifest.stop_reason == "interrupted", (manifest.stop_reason, manifest.duration_s)


def test_a_test_that_ends_during_its_probes_says_so_and_fails(tmp_path: Path) -> None:
    """``-t`` shorter than the idle probes: Locust's timer ends the test before its clock starts. Before, the folder
    held the probes' shard and no run.json, and Locust exited 0; now run.json says interrupted during calibration,
    Locust exits 1 with one line, and the gate never passes (nothing was measured)."""
    port_file = tmp_path / "port"
    # an L4 preset: three 4,000-token prefills take longer than the 2-s test
    testbed = subprocess.Popen(
        [sys.executable, "-m", "rushhour.testbed", "--port", "0", "--port-file", str(port_file),
         "--preset", "l4-llama8b", "--replicas", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert testbed.poll() is None and time.monotonic() < deadline, "the testbed did not start"
            time.sleep(0.05)
        locustfile = tmp_path / "locustfile.py"
        locustfile.write_text("from locust import constant\nfrom rushhour.locust import ChatUser\n\n\n"
                              "class Chat(ChatUser):\n    wait_time = constant(0.5)\n    prompt_tokens = 64\n"
                              "    output_tokens = 8\n    calibration = {'probes': 3, 'prompt_tokens': [4000]}\n")
        run_dir = tmp_path / "run"
        run = subprocess.run(_locust(locustfile, "--headless", "-u", "2", "-r", "2", "-t", "2s", "--host",
                                     f"http://127.0.0.1:{int(port_file.read_text())}", "--rh-run-dir", str(run_dir)),
                             cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    finally:
        os.kill(testbed.pid, signal.SIGTERM)
        testbed.wait(timeout=10)
    manifest = read_manifest(run_dir)
    # the testbed's L4 takes ≈ 1.3 s per 4,000-token prefill in real time: the probes always outlast -t 2s
    assert manifest.mono_anchor_ns is None, manifest
    assert (manifest.stop_reason, manifest.interrupted_during) == ("interrupted", "calibration"), manifest
    assert run.returncode == 1 and "nothing was measured" in run.stderr, run.stderr[-2000:]
    gate = subprocess.run([sys.executable, "-m", "rushhour.cli", "gate", str(run_dir)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert gate.returncode == 2 and "Traceback" not in gate.stderr, gate.stdout[-2000:] + gate.stderr[-2000:]
