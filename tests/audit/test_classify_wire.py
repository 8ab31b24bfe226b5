"""The real chain: vendor fixture bytes → the loadgen's response parser → record facts → audit class.

The loadgen's parser imports gevent, which the audit process must never load, so the parsing runs
in a subprocess that prints the record facts as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rushhour.audit.classify import classify_one

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vendor"

SCRIPT = r"""
import json, sys
from pathlib import Path
from rushhour.records.record import RequestRecord
from rushhour.loadgen.engine.wire.client import _Attempt, _fill
from rushhour.loadgen.engine.wire.http import ResponseHead

out = []
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    case = json.loads(path.read_text())
    dialect = "anthropic-messages" if case["profile"] == "anthropic" else "openai-chat"
    attempt = _Attempt(dialect, bool(case.get("stream", True)), False)
    attempt.on_headers(ResponseHead(status=case["status"], headers=case["headers"]), 1_000)
    body = case["body"].encode()
    for i in range(0, len(body), 7):  # arrive in small pieces, as over a socket
        attempt.on_body(body[i:i + 7], 2_000 + i)
    record = RequestRecord(run_id="r", seq=1, request_id="x", logical_id="x", tier="t", tenant="t", persona="p")
    _fill(record, attempt, 0, 10_000_000)
    out.append({"file": path.name, "profile": case["profile"], "expected": case["expected_class"],
                "facts": {"status": record.status, "reason": record.reason, "error": record.error,
                          "in_band_error": record.in_band_error, "complete": record.complete,
                          "first_token": record.first_token_ns is not None}})
print(json.dumps(out))
"""


def _parsed() -> list[dict[str, object]]:
    try:
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(FIXTURES)], capture_output=True, text=True,
                              cwd=ROOT, timeout=60, check=False)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pytest.fail("the loadgen parser subprocess hung")
    if proc.returncode != 0:
        pytest.fail(f"loadgen's response parser could not be driven (API changed?):\n{proc.stderr[-2000:]}")
    return list(json.loads(proc.stdout))


def test_loadgen_parser_then_classifier() -> None:
    rows = _parsed()
    assert len(rows) >= 15
    wrong = []
    for row in rows:
        got = classify_one(str(row["profile"]), **row["facts"])  # type: ignore[arg-type]
        if got != row["expected"]:
            wrong.append(f"{row['file']}: {got} != {row['expected']} from {row['facts']}")
    assert not wrong, "\n".join(wrong)
