"""Each engine release's recorded rejection texts against the classifier's rules (stacks/vllm.py, stacks/litellm.py).

Every release in engines/releases.toml has its wire fixtures (tests/fixtures/real/<engine>-<version>/). An
error answer of one shape (a fixture's case) must be decided by the same rule in every release: a release
that reworded a text is caught here, and the rule must cover both wordings. Each distinct wording is a row
of docs/development.md's "Rejection texts by release" table, so a change between releases is a named,
documented difference, never a silent one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import load_script

from rushhour import stacks

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "real"
DOC = ROOT / "docs" / "development.md"
PROFILE = {"vllm": "vllm", "litellm": "litellm"}




RELEASES = load_script("engines/releases.py").load()


def message(case: dict[str, object]) -> str | None:
    """The error text of a recorded answer (its body's error message, or the in-band error's), or None."""
    body = str(case["body"])
    docs: list[object] = []
    if int(case["status"]) >= 300:  # type: ignore[call-overload]
        try:
            docs.append(json.loads(body))
        except ValueError:
            return body.strip()[:500]
    else:  # an error inside a 200 stream: ``data: {"error": …}``
        for line in body.splitlines():
            if line.startswith("data:") and '"error"' in line:
                docs.append(json.loads(line[5:]))
    for doc in docs:
        error = doc.get("error") if isinstance(doc, dict) else None
        text = error.get("message") if isinstance(error, dict) else error
        if text:
            return str(text)
    return None


def normalised(text: str) -> str:
    """The wording without what differs between any two answers (key hashes, ids, clock times)."""
    text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?", "<time>", text)
    return re.sub(r"\b[0-9a-f]{16,}\b", "<hex>", text)


def rule_name(engine: str, text: str, status: int) -> str:
    """The rule that decides this text: its class and pattern (or the status default when no pattern matches)."""
    rule = stacks.get(PROFILE[engine]).rule_for(text, status, False)
    if rule is None:
        return f"status {status} default"
    return f"{rule.cls}: {rule.pattern or f'status {rule.statuses}'}"


def error_texts() -> dict[tuple[str, str], dict[str, tuple[str, str]]]:
    """(engine, case) → release → (normalised text, deciding rule), for every recorded error answer."""
    out: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
    for release in RELEASES:
        for path in sorted((FIXTURES / release.name).glob("*.json")):
            case = json.loads(path.read_text())
            text = message(case)
            if text is None:
                continue
            out.setdefault((release.engine, path.stem), {})[release.name] = (
                normalised(text), rule_name(release.engine, text, int(case["status"])))
    return out


def table_rows() -> list[str]:
    """docs/development.md's rows: one per engine, case and distinct wording, with the releases that send it."""
    rows = []
    for (engine, case), by_release in sorted(error_texts().items()):
        wordings: dict[str, list[str]] = {}
        for name, (text, _) in by_release.items():
            wordings.setdefault(text, []).append(name)
        changed = "changed" if len(wordings) > 1 else "same"
        for text, names in wordings.items():
            shown = text.replace("|", "\\|").replace("\n", " ")
            rows.append(f"| {engine} | `{case}` | {', '.join(names)} | {changed} | {shown} |")
    return rows


def test_every_release_has_its_recording() -> None:
    for release in RELEASES:
        folder = FIXTURES / release.name
        assert folder.is_dir() and any(folder.glob("*.json")), \
            f"{release.name}: no wire fixtures in {folder} (engines/record_fixtures.py --release {release.name})"


def test_every_release_has_an_error_text_per_shape() -> None:
    # a recording that lost its errors would pass every comparison below vacuously
    texts = error_texts()
    for release in RELEASES:
        cases = {case for (engine, case), by in texts.items() if release.name in by}
        assert len(cases) >= {"vllm": 7, "litellm": 6}[release.engine], (release.name, sorted(cases))


def test_each_shape_is_decided_by_the_same_rule_in_every_release() -> None:
    wrong = []
    for (engine, case), by_release in sorted(error_texts().items()):
        rules = {rule for _, rule in by_release.values()}
        if len(rules) > 1:
            wrong.append(f"{engine} {case}: " + "; ".join(f"{name} → {rule} ({text[:120]!r})"
                                                         for name, (text, rule) in by_release.items()))
    assert not wrong, "a release's text is classified by another rule:\n" + "\n".join(wrong)


def test_the_docs_list_every_wording_and_every_difference() -> None:
    documented = {line.strip() for line in DOC.read_text().splitlines() if line.startswith("| ")}
    want = table_rows()
    missing = [row for row in want if row not in documented]
    assert not missing, "docs/development.md's 'Rejection texts by release' table lacks (paste):\n" + "\n".join(want)
    stale = [line for line in documented
             if re.match(r"\| (vllm|litellm) \| `[\w-]+` \| ", line) and line not in want]
    assert not stale, f"docs/development.md lists wordings no recording has: {stale}"


@pytest.mark.parametrize(("text", "expected"), [
    ("Limit resets at: 2026-11-30 23:56:51 UTC for 0a1367aee3baee26ae0e552834650a2a",
     "Limit resets at: <time> UTC for <hex>"),
    ("max_parallel_requests=4 requests", "max_parallel_requests=4 requests"),
])
def test_normalising_keeps_the_wording(text: str, expected: str) -> None:
    assert normalised(text) == expected


def test_rules_are_told_apart_by_what_decides_them() -> None:
    # the same-rule check compares these names: two texts under different rules must not look alike
    busy = rule_name("vllm", "The engine is currently busy and cannot accept new requests.", 503)
    backlog = rule_name("vllm", "The engine has reached its prefill token backlog limit.", 503)
    assert busy.startswith("queue_full: ") and backlog.startswith("queue_full: ") and busy != backlog
    assert rule_name("vllm", "This model's maximum context length is 2048 tokens.", 400) == "status 400 default"
