"""Wire fixtures recorded from real servers → the loadgen's response parser → the audit's class.

The fixtures under tests/fixtures/real/<stack>-<version>/ are raw answers of each real vLLM and LiteLLM
proxy release of engines/releases.toml and of LiteLLM in front of vLLM (engines/record_fixtures.py records
them again after a version bump). Each names the class the audit must give it; a rejection must never come out as
``failed``, ``transport`` or ``unclassified``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rushhour.audit.classify import classify_one, named_cause
from rushhour.stacks.vllm import TOOLS_REFUSED

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "real"

# The shapes each recording must hold: a re-recording that lost one fails here, not silently.
REQUIRED = {
    "vllm": {"vllm-200-served", "vllm-200-stream-served", "vllm-503-queue-full", "vllm-200-stream-in-band-queue-full",
             "vllm-503-token-backlog", "vllm-200-stream-in-band-token-backlog", "vllm-400-context-too-long",
             "vllm-200-stream-tool-call", "vllm-200-tool-call", "vllm-200-stream-messages-tool-call",
             "vllm-400-tools-refused", "vllm-400-stream-tools-refused"},
    "litellm": {"litellm-200-served", "litellm-200-stream-served", "litellm-401-bad-key",
                "litellm-429-deployment-slots", "litellm-429-stream-deployment-slots",
                "litellm-429-key-max-parallel", "litellm-429-key-rpm", "litellm-429-stream-key-rpm"},
    "litellm-vllm": {"gateway-200-stream-served", "gateway-503-engine-queue-full",
                     "gateway-stream-engine-queue-full"},
}
NEVER_FOR_A_REJECTION = {"failed", "transport", "unclassified"}

SCRIPT = r"""
import json, sys
from pathlib import Path
from rushhour.records.record import RequestRecord
from rushhour.loadgen.engine.wire.client import _Attempt, _fill
from rushhour.loadgen.engine.wire.http import ResponseHead

out = []
for path in sorted(Path(sys.argv[1]).glob("*/*.json")):
    case = json.loads(path.read_text())
    dialect = "anthropic-messages" if case.get("endpoint") == "/v1/messages" else "openai-chat"
    attempt = _Attempt(dialect, bool(case["stream"]), False)
    attempt.on_headers(ResponseHead(status=case["status"], headers=case["headers"]), 1_000)
    body = case["body"].encode()
    for i in range(0, len(body), 7):  # arrive in small pieces, as over a socket
        attempt.on_body(body[i:i + 7], 2_000 + i)
    record = RequestRecord(run_id="r", seq=1, request_id="x", logical_id="x", tier="t", tenant="t", persona="p")
    _fill(record, attempt, 0, 10_000_000)
    out.append({"file": f"{path.parent.name}/{path.name}", "profile": case["profile"],
                "expected": case["expected_class"],
                "facts": {"status": record.status, "reason": record.reason, "error": record.error,
                          "in_band_error": record.in_band_error, "complete": record.complete,
                          "first_token": record.first_token_ns is not None}})
print(json.dumps(out))
"""


def _cases() -> list[tuple[Path, dict[str, object]]]:
    return [(p, json.loads(p.read_text())) for p in sorted(FIXTURES.glob("*/*.json"))]


@pytest.fixture(scope="module")
def parsed() -> list[dict[str, object]]:
    try:
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(FIXTURES)], capture_output=True, text=True,
                              cwd=ROOT, timeout=60, check=False)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pytest.fail("the loadgen parser subprocess hung")
    if proc.returncode != 0:
        pytest.fail(f"loadgen's response parser could not be driven (API changed?):\n{proc.stderr[-2000:]}")
    return list(json.loads(proc.stdout))


def test_every_recording_holds_every_shape() -> None:
    folders = {p.name: p for p in FIXTURES.iterdir() if p.is_dir()}
    for stack, cases in REQUIRED.items():
        matching = [f for name, f in folders.items()
                    if name.startswith(f"{stack}-") and name[len(stack) + 1:][:1].isdigit()]
        assert matching, f"no recording for {stack} under {FIXTURES}"
        for folder in matching:
            have = {p.stem for p in folder.glob("*.json")}
            assert cases <= have, f"{folder.name} lacks {sorted(cases - have)}"


def test_fixtures_are_raw_recordings_without_credentials() -> None:
    cases = _cases()
    assert len(cases) >= 18
    for path, case in cases:
        for field in ("profile", "case", "server", "version", "status", "headers", "body", "stream",
                      "expected_class", "source", "how"):
            assert field in case, f"{path.name}: no {field}"
        assert case["case"] == path.stem
        headers = case["headers"]
        assert isinstance(headers, dict) and all(k == k.lower() for k in headers)
        text = json.dumps(case)
        assert "authorization" not in headers, path.name
        assert not re.search(r"sk-tier-[a-z]+-\w|sk-rushhour", text), f"{path.name}: a key in a fixture"


def test_recorded_answers_get_their_class(parsed: list[dict[str, object]]) -> None:
    wrong = []
    for row in parsed:
        got = classify_one(str(row["profile"]), **row["facts"])  # type: ignore[arg-type]
        if got != row["expected"]:
            wrong.append(f"{row['file']}: {got} != {row['expected']} from {row['facts']}")
    assert not wrong, "\n".join(wrong)


def test_tools_refused_by_vllm_is_named(parsed: list[dict[str, object]]) -> None:
    rows = [r for r in parsed if "tools-refused" in str(r["file"])]
    vllm_folders = [p for p in FIXTURES.glob("vllm-*") if p.name[5:6].isdigit()]
    assert vllm_folders and len(rows) == 2 * len(vllm_folders)  # streamed and not, per recorded vLLM release
    for row in rows:
        facts = {k: v for k, v in row["facts"].items() if k != "complete"}  # type: ignore[union-attr]
        assert named_cause(str(row["profile"]), **facts) == TOOLS_REFUSED, row  # type: ignore[arg-type]


def test_no_rejection_is_failed_transport_or_unclassified(parsed: list[dict[str, object]]) -> None:
    for row in parsed:
        facts = row["facts"]
        assert isinstance(facts, dict)
        rejected = int(facts["status"]) >= 300 or bool(facts["in_band_error"])
        if rejected and facts["status"] not in (400, 401):  # the malformed request and the bad key are failures
            got = classify_one(str(row["profile"]), **facts)
            assert got not in NEVER_FOR_A_REJECTION, f"{row['file']}: {got}"


def test_in_band_errors_are_seen_as_in_band(parsed: list[dict[str, object]]) -> None:
    rows = {str(r["file"]).split("/")[1]: r for r in parsed}
    for name in ("vllm-200-stream-in-band-queue-full.json", "vllm-200-stream-in-band-token-backlog.json"):
        facts = rows[name]["facts"]
        assert isinstance(facts, dict)
        assert facts["status"] == 200 and facts["in_band_error"], f"{name}: {facts}"
