"""Fixtures for the report tests: Summary objects built directly from the contract."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_here = str(Path(__file__).resolve().parent)
if _here not in sys.path:  # importable helpers whatever pytest's import mode is
    sys.path.insert(0, _here)

from report_fixtures import big_summary, edge_summary, realistic_summary  # noqa: E402

from rushhour.audit.summary import Summary  # noqa: E402


@pytest.fixture
def summary() -> Summary:
    return realistic_summary()


@pytest.fixture
def edge() -> Summary:
    return edge_summary()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs" / "demo"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def big() -> Summary:
    return big_summary()
