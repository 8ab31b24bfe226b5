"""No starved tier passes (issue 34), end to end: real short runs on the testbed, gated by the real CLI.

Before: three tiers with 0 % served — every user gave up (patience 5 ms on long prompts), every request
answered 429 (the testbed's ``x-rushhour-fault`` header) — whose SLOs named only checks that judge
nothing there (``floor_share`` without saturation, ``max_deadline_miss_rate`` on sessions without
deadlines, ``max_abandon_rate`` without patience) gated exit 0, each shown "PASS" beside "100 %" not
served; and a served tier with only such checks passed too. Now the first is exit 1 (``min_served``
fails), the second exit 2 (NOT JUDGED) unless its SLO allows it, in every output.
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from support import run, rushhour

pytestmark = pytest.mark.e2e

CHAT = ("{kind: chat, name: %s, tier: %s, arrival: {process: poisson, rate: 2}, turns: 1, system_prompt_tokens: 0, "
        "prompt_tokens: {dist: constant, value: %d}, output_tokens: {dist: constant, value: 8}%s}")
HEAD = """seed: 34
target:
  url: testbed
  testbed: {preset: tiny, replicas: 1}
  metrics: null
phases:
  - {name: main, duration: 6s}
drain_s: 3
calibration: {probes: 0}
"""
STARVED = HEAD + f"""name: e2e-starved
tiers:
  - {{name: gaveup, priority: -1, slo: {{floor_share: 0.1}}}}
  - {{name: refused, priority: 0, headers: {{x-rushhour-fault: "429"}}, slo: {{max_deadline_miss_rate: 0.1}}}}
  - {{name: quota, priority: 0, headers: {{x-rushhour-fault: "429"}}, slo: {{max_abandon_rate: 0.1}}}}
personas:
  - {CHAT % ("hurried", "gaveup", 3000, ", patience_s: {dist: constant, value: 0.005}")}
  - {CHAT % ("refused-chat", "refused", 64, "")}
  - {CHAT % ("quota-chat", "quota", 64, "")}
"""
VACUOUS = HEAD + f"""name: e2e-vacuous
tiers:
  - {{name: gold, priority: 10, slo: {{max_drop_rate: 0.5}}}}
  - {{name: chatty, priority: 0, slo: {{max_abandon_rate: 0.1, max_deadline_miss_rate: 0.1}}}}
personas:
  - {CHAT % ("gold-chat", "gold", 64, "")}
  - {CHAT % ("chatty-chat", "chatty", 64, "")}
"""


def _run(tmp: Path, body: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``rushhour run SCENARIO --gate`` with JUnit and Markdown, as a CI step would call it."""
    proc, run_dir, _ = run(body, tmp, "--gate", "--junit", tmp / "junit.xml", "--markdown", tmp / "gate.md")
    return proc, run_dir


def _verdicts(run_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    summary = json.loads((run_dir / "summary.json").read_text())
    return {(v["tier"], v["check"]): v for v in summary["verdicts"]}


@pytest.fixture(scope="module")
def starved(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    tmp = tmp_path_factory.mktemp("starved")
    proc, run_dir = _run(tmp, STARVED)
    return proc, run_dir, tmp


def test_starved_tiers_fail_the_gate(starved: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    proc, run_dir, tmp = starved
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # before: 0, "PASS: all 3 SLO checks passed"
    summary = json.loads((run_dir / "summary.json").read_text())
    by_tier = {t["name"]: t for t in summary["tiers"]}
    assert by_tier["gaveup"]["by_class"].get("abandoned", 0) == by_tier["gaveup"]["requests"] > 0
    for tier in ("refused", "quota"):
        assert by_tier[tier]["by_status"].get("429", 0) == by_tier[tier]["attempts"] > 0
    verdicts = _verdicts(run_dir)
    vacuous = {"gaveup": "floor_share", "refused": "sessions.max_deadline_miss_rate",
               "quota": "persona.quota-chat.max_abandon_rate"}
    for tier, check in vacuous.items():
        starved_check = verdicts[(tier, "min_served")]
        assert not starved_check["passed"] and "starved: none of its" in starved_check["message"]
        v = verdicts[(tier, check)]
        assert v["vacuous"] and not v["passed"] and f"{tier} {check}: vacuous: " in v["message"], v
        assert by_tier[tier]["by_class"].get("served", 0) == 0
    assert not summary["passed"] and summary["exit_code"] == 1
    # every output says it: terminal, JUnit, Markdown (the gate's and the report's), HTML
    for tier in vacuous:  # the tier table's row: FAIL beside 100 % not served, never PASS
        row = next(line for line in out.splitlines() if line.strip().startswith(tier + " "))
        assert "FAIL 1/1" in row and "(100 %)" in row and "PASS" not in row, row
    assert "FAIL: 3 of 3 SLO checks failed" in out and "VACUOUS" in out
    cases = {(c.get("classname"), c.get("name")): c for c in ET.parse(tmp / "junit.xml").getroot().iter("testcase")}
    assert cases[("rushhour.gaveup", "min_served")].find("failure") is not None
    assert cases[("rushhour.gaveup", "floor_share")].find("skipped") is not None
    for name in (tmp / "gate.md", run_dir / "report.md"):
        text = name.read_text()
        assert "❌ FAIL" in text and "➖ vacuous" in text and "starved: none of its" in text, name
    html = (run_dir / "report.html").read_text()
    assert "VACUOUS" in html and "starved: none of its" in html


@pytest.fixture(scope="module")
def vacuous_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    tmp = tmp_path_factory.mktemp("vacuous")
    proc, run_dir = _run(tmp, VACUOUS)
    return proc, run_dir, tmp


def test_a_tier_with_only_vacuous_checks_is_not_judged(
        vacuous_run: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    proc, run_dir, tmp = vacuous_run
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out  # before: 0
    verdicts = _verdicts(run_dir)
    marker = verdicts[("chatty", "judged")]
    assert marker["inconclusive"] and not marker["passed"]
    assert marker["message"].startswith("chatty judged: NOT JUDGED: every check was vacuous")
    assert verdicts[("gold", "max_drop_rate")]["passed"]
    assert "NOT JUDGED: every SLO check of chatty was vacuous" in out
    case = next(c for c in ET.parse(tmp / "junit.xml").getroot().iter("testcase") if c.get("name") == "judged")
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "not_judged"
    assert "❔ NOT JUDGED" in (tmp / "gate.md").read_text()
    assert 'id="badge">NOT JUDGED<' in (run_dir / "report.html").read_text()


def test_allow_not_judged_is_the_users_explicit_choice(
        vacuous_run: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    _, run_dir, tmp = vacuous_run
    slo = tmp / "allow.yaml"
    slo.write_text("tiers:\n  chatty: {max_abandon_rate: 0.1, max_deadline_miss_rate: 0.1, allow_not_judged: true}\n")
    gate = rushhour("gate", str(run_dir), "--slo", str(slo))
    assert gate.returncode == 0, gate.stdout + gate.stderr  # gold judged and passed; chatty allowed, and said so
    assert "NOT JUDGED, allowed by allow_not_judged: chatty" in gate.stdout
