"""summary.schema.json is current; the audit never imports locust or gevent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rushhour.audit.schema import SCHEMA_PATH, summary_schema_text

ROOT = Path(__file__).resolve().parents[2]


def test_schema_file_is_up_to_date() -> None:
    assert SCHEMA_PATH.exists(), "docs/summary.schema.json is missing: run `python -m rushhour.audit.schema`"
    assert SCHEMA_PATH.read_text() == summary_schema_text(), "stale schema: run `python -m rushhour.audit.schema`"
    schema = json.loads(SCHEMA_PATH.read_text())
    assert "schema" in schema["properties"] and "tiers" in schema["required"]


def test_audit_imports_no_locust_or_gevent() -> None:
    code = ("import sys, audit, audit.ledger, audit.classify, audit.schema; "
            "bad = [m for m in ('locust', 'gevent', 'reports') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
