"""Generate ``docs/summary.schema.json`` from the Summary model: ``python -m rushhour.audit.schema [--check]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rushhour.audit.summary import Summary

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "docs" / "summary.schema.json"


def summary_schema_text() -> str:
    """The JSON Schema of summary.json, as committed (by alias: the top-level key is ``schema``)."""
    schema = Summary.model_json_schema(by_alias=True)
    schema["$id"] = "https://rushhour.dev/schemas/summary.schema.json"
    schema["title"] = "rushhour summary.json"
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the schema file, or with ``--check`` exit 1 when it is out of date."""
    args = sys.argv[1:] if argv is None else argv
    text = summary_schema_text()
    if "--check" in args:
        current = SCHEMA_PATH.read_text() if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is out of date: run `python -m rushhour.audit.schema`", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
