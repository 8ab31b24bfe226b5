"""A 1M-request, day-long, many-tenant summary still renders a small HTML report."""

from __future__ import annotations

import time
from pathlib import Path

from rushhour.audit.summary import Summary
from rushhour.reports import write_reports

LIMIT = 5 * 1024 * 1024


def test_million_requests_under_5_mb(big: Summary, run_dir: Path) -> None:
    assert sum(t.requests for t in big.tiers) >= 999_999 and len(big.timeline.t) == 86_400
    start = time.perf_counter()
    paths = write_reports(big, run_dir)
    elapsed = time.perf_counter() - start
    size = paths["html"].stat().st_size
    assert size < LIMIT, f"report.html is {size / 1e6:.1f} MB"
    html = paths["html"].read_text()
    for tier in big.tiers:
        assert f'data-tier="{tier.name}"' in html
    assert "worst 50 shown" in html
    assert elapsed < 20
