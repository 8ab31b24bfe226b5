"""Ground truth: the audit's per-tier classes and TTFT against the testbed's own ledger.

``assert_matches_ledger`` joins every attempt to its ledger line by request id (``x-request-id``)
and requires the per-tier counts per class to be equal, and TTFT percentiles to agree within a few
milliseconds. It is tested on a hand-written ledger here, and on real ``rushhour run`` runs of the
saturating scenarios in ``tests/audit/scenarios/`` (llm-d and SGLang profiles).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ANCHOR, MS, RunBuilder, S
from support import cli_command

from rushhour.audit import run_audit
from rushhour.audit.ledger import LEDGER_FILE, compare_with_ledger, load_ledger

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
E2E = ["gt-llmd", "gt-sglang"]


def assert_matches_ledger(run_dir: Path, *, ttft_abs_ms: float = 10.0, ttft_rel: float = 0.05) -> None:
    """Audit ``run_dir`` and compare with its ``testbed-ledger.jsonl``; raise with every difference."""
    ledger = run_dir / LEDGER_FILE
    assert ledger.exists(), f"{run_dir} has no {LEDGER_FILE}: the testbed did not write its ledger"
    summary = run_audit(run_dir)
    cmp = compare_with_ledger(run_dir, summary)
    problems = cmp.count_problems() + cmp.ttft_problems(rel=ttft_rel, abs_ms=ttft_abs_ms)
    detail = json.dumps({"audit": cmp.audit_counts, "ledger": cmp.ledger_counts, "ttft_ms": cmp.ttft_ms,
                         "mismatched (first)": cmp.mismatched[:10]}, indent=1, default=str)
    assert not problems, "audit disagrees with the testbed ledger:\n  " + "\n  ".join(problems) + "\n" + detail
    assert sum(sum(c.values()) for c in cmp.ledger_counts.values()) > 0, "no ledger line joined any record"
    # clocks: the server's arrival (re-based on the run anchor) comes just after the client's send
    assert cmp.arrival_offset_ms_p50 is not None and -1.0 <= cmp.arrival_offset_ms_p50 <= 50.0, (
        f"records and ledger are not on one clock: arrival − send p50 = {cmp.arrival_offset_ms_p50} ms")


# --------------------------------------------------------------------------- hand-written fixture


def _ledger_line(rid: str, *, arrival: int, first: int | None, end: int, outcome: str, status: int,
                 priority: int, reason: str | None = None) -> str:
    mono = ANCHOR.mono_ns  # the ledger holds raw CLOCK_MONOTONIC ns
    return json.dumps({
        "request_id": rid, "arrival_ns": mono + arrival, "dispatch_ns": None if first is None else mono + arrival,
        "first_token_ns": None if first is None else mono + first, "end_ns": mono + end, "queue_wait_ns": 0,
        "priority": priority, "tenant": "t", "status": status, "reason": reason, "in_band_error": False,
        "outcome": outcome, "output_tokens": 10, "cached_tokens": 0, "preemptions": 0,
    })


def build_fixture(root: Path, *, corrupt: bool = False) -> Path:
    b = RunBuilder(root)
    lines = []
    for i in range(30):  # interactive: served, TTFT 100 + 10·i ms at the server, +0.5 ms on the client
        sent = i * S
        arrival, first = sent + MS // 2, sent + (100 + 10 * i) * MS
        b.request(request_id=f"i{i}", tier="interactive", sent_ns=sent, first_token_ns=first + MS // 2)
        lines.append(_ledger_line(f"i{i}", arrival=arrival, first=first, end=first + 300 * MS, outcome="served",
                                  status=200, priority=100))
    for i in range(10):  # batch: rejected-saturated
        b.dropped(request_id=f"q{i}", status=429, reason="rejected-saturated", tier="batch", persona="agents",
                  sent_ns=i * S)
        lines.append(_ledger_line(f"q{i}", arrival=i * S + MS, first=None, end=i * S + 5 * MS,
                                  outcome="queue_full", status=429, priority=-1, reason="rejected-saturated"))
    # a client timeout: the server logged the disconnect as cancelled
    b.request(request_id="to", tier="batch", persona="agents", sent_ns=40 * S, status=0, client_timeout=True,
              complete=False, headers_ns=None, first_token_ns=None, last_token_ns=None, done_ns=45 * S)
    lines.append(_ledger_line("to", arrival=40 * S + MS, first=None, end=45 * S, outcome="cancelled", status=0,
                              priority=-1))
    # a connection refused never reached the server: no ledger line expected
    b.request(request_id="tr", tier="batch", persona="agents", sent_ns=41 * S, status=0, transport_error=True,
              complete=False, headers_ns=None, first_token_ns=None, last_token_ns=None, done_ns=41 * S)
    if corrupt:  # the server says this one expired in the queue; the client's record says rejected
        lines[30] = lines[30].replace('"queue_full"', '"queue_timeout"')
    run = b.close()
    (run / LEDGER_FILE).write_text("\n".join(lines) + "\n" + '{"request_id": "half')
    return run


def test_ledger_loader(tmp_path: Path) -> None:
    run = build_fixture(tmp_path)
    frame = load_ledger(run / LEDGER_FILE)
    assert len(frame) == 41 and frame.attrs["skipped_lines"] == 1
    assert frame["arrival_ns"].min() == ANCHOR.mono_ns + MS // 2


def test_hand_written_ledger_matches(tmp_path: Path) -> None:
    run = build_fixture(tmp_path)
    assert_matches_ledger(run, ttft_abs_ms=1.0, ttft_rel=0.0)
    cmp = compare_with_ledger(run, run_audit(run))
    assert cmp.ledger_counts == {"interactive": {"served": 30}, "batch": {"queue_full": 10, "cancelled": 1}}
    assert cmp.arrival_offset_ms_p50 == pytest.approx(0.5)
    # client: 100 + 10·i + 0.5 ms from its send; ledger: 100 + 10·i − 0.5 ms from arrival; median of i = 0..29
    audit_p50, ledger_p50 = cmp.ttft_ms["interactive"]["p50"]
    assert audit_p50 == pytest.approx(245.5) and ledger_p50 == pytest.approx(244.5)


def test_mismatch_is_reported(tmp_path: Path) -> None:
    run = build_fixture(tmp_path, corrupt=True)
    with pytest.raises(AssertionError, match=r"batch/queue_full: audit 10 vs ledger 9") as exc:
        assert_matches_ledger(run)
    assert "q0" in str(exc.value)


# --------------------------------------------------------------------------- real runs


def _missing_pieces() -> str | None:
    """Why a real run cannot happen here, or None."""
    if shutil.which("rushhour", path=str(Path(sys.executable).parent)) is None:
        return "the `rushhour` entry point is not installed in the venv"
    for module in ("loadgen/runner.py", "loadgen/testbed_proc.py", "testbed/__main__.py"):
        if not (ROOT / module).exists():
            return f"{module} is missing (helper-1 testbed / helper-2 runner not landed yet)"
    return None


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run both ground-truth scenarios at once (≈ 25 s together) and return their run folders."""
    missing = _missing_pieces()
    if missing:
        pytest.fail(f"ground-truth e2e cannot run: {missing}. Wire the runner and testbed, then rerun.")
    procs = {}
    for name in E2E:
        out = tmp_path_factory.mktemp(name)
        cmd = [*cli_command(script=True), "run", str(SCENARIOS / f"{name}.yaml"), "--out", str(out), "--no-report"]
        procs[name] = (out, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True, env={**os.environ, "NO_COLOR": "1"}))
    deadline = time.monotonic() + 150
    runs = {}
    for name, (out, proc) in procs.items():
        try:
            log, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            log, _ = proc.communicate()
            pytest.fail(f"`rushhour run {name}` did not finish in time:\n{log[-3000:]}")
        folders = [p for p in out.iterdir() if (p / "run.json").exists()]
        if proc.returncode not in (0, 1, 2) or len(folders) != 1:
            pytest.fail(f"`rushhour run {name}` failed (exit {proc.returncode}):\n{log[-3000:]}")
        runs[name] = folders[0]
    return runs


@pytest.mark.e2e
@pytest.mark.serial  # two saturating runs at once already: timings against the ledger's, to the ms
@pytest.mark.parametrize("name", E2E)
def test_real_run_matches_ledger(real_runs: dict[str, Path], name: str) -> None:
    run = real_runs[name]
    assert_matches_ledger(run)
    summary = run_audit(run)
    # the scenario saturates: some tier must have been dropped, and the top tier served
    assert any(t.drop_rate.k for t in summary.tiers), "the ground-truth scenario no longer saturates"
    assert summary.tiers[0].by_class["served"] > 0
