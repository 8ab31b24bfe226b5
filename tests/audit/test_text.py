"""Numbers for people are formatted in one place of the audit (audit/text.py), shared with the reports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rushhour.audit import text
from rushhour.reports import fmt

AUDIT = Path(__file__).resolve().parents[2] / "audit"


@pytest.mark.parametrize(("value", "expected"), [
    (None, "–"), (0, "0"), (0.42, "0.42 ms"), (410.0, "410 ms"), (2100.0, "2.10 s"), (48_000.0, "48.0 s"),
    (720_000.0, "12.0 min"),
])
def test_ms(value: float | None, expected: str) -> None:
    assert text.ms(value) == expected


@pytest.mark.parametrize(("value", "digits", "expected"), [
    (None, None, "–"), (0.0, None, "0 %"), (0.31, None, "31 %"), (0.097, None, "9.7 %"), (0.0032, None, "0.32 %"),
    (1.0, None, "100 %"), (0.0123, 2, "1.23 %"), (0.5, 0, "50 %"),
])
def test_pct(value: float | None, digits: int | None, expected: str) -> None:
    assert text.pct(value, digits) == expected


def test_signed_changes_never_read_minus_zero() -> None:
    assert text.signed_pct(-0.002) == "+0 %" and text.signed_pct(-0.012) == "-1 %" and text.signed_pct(0.25) == "+25 %"
    assert text.signed_points(-0.0004) == "+0.0 pt" and text.signed_points(-0.015) == "-1.5 pt"
    assert text.signed_pct(float("inf")) == "+inf %"


def test_reports_use_the_same_functions() -> None:
    assert fmt.ms is text.ms and fmt.pct is text.pct and fmt.times is text.times and fmt.p_value is text.p_value


def test_a_p_value_never_reads_zero() -> None:
    assert text.p_value(0.0) == "< 0.001" and text.p_clause(0.0) == "p < 0.001"  # it read "p = 0"
    assert text.p_value(1e-30) == "< 0.001" and text.p_clause(0.0312) == "p = 0.0312"
    assert text.p_value(0.001) == "0.001" and text.p_value(0.5) == "0.5"


def _format_specs(path: Path) -> list[str]:
    """Every f-string format spec of a module that shapes a number (precision, %, g)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = "".join(v.value for v in ast.walk(node.format_spec)
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
            if any(ch in spec for ch in ".%g"):
                found.append(f"{path.name}:{node.lineno}: {{…:{spec}}}")
    return found


def test_no_other_audit_module_formats_numbers() -> None:
    found = [spec for path in sorted(AUDIT.glob("*.py")) if path.name != "text.py" for spec in _format_specs(path)]
    assert not found, "format numbers through audit/text.py:\n" + "\n".join(found)
