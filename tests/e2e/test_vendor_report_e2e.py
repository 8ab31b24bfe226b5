"""The vendor scenario rehearsed on the testbed (OpenAI mode): flex beside default, tokens, spend, no flex price."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import rushhour

pytestmark = pytest.mark.e2e
KEY = "sk-rehearsal-0123456789abcdef"


def test_openai_flex_report_prices_only_what_the_table_prices(tmp_path: Path) -> None:
    run = rushhour("run", "openai-flex", "--target", "testbed", "--profile", "openai", "--duration", "10s", "--out",
                   str(tmp_path), env={"OPENAI_API_KEY": KEY}, timeout=300)
    assert run.returncode in (0, 1, 2), run.stderr[-3000:]  # judged (too few samples for a p99 is exit 2)
    assert "Traceback" not in run.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "summary.json").exists()]
    spend = json.loads((run_dir / "summary.json").read_text())["spend"]
    tiers = {t["tier"]: t for t in spend["tiers"]}
    default, flex = tiers["default"], tiers["flex"]
    assert default["prompt_tokens"] > 0 and default["output_tokens"] > 0 and flex["prompt_tokens"] > 0
    expected = (default["prompt_tokens"] * 0.4 + default["output_tokens"] * 1.6) / 1e6
    assert default["price_from"] == "run" and abs(default["cost_usd"] - expected) < 1e-6
    # the file's price table has no flex row: no price, not the default's
    assert flex["cost_usd"] is None and "no price for service tier 'flex'" in flex["no_price"]
    assert spend["unpriced_tiers"] == ["flex"] and spend["cost_usd"] == default["cost_usd"]
    assert spend["budget_limits"]["max_requests"] == 300 and 0 < spend["budget_share"]["max_requests"] < 1
    html = (run_dir / "report.html").read_text()
    side = html.split('id="side-by-side"')[1].split("</table>")[0]
    assert "TTFT p50 [95 % CI]" in side and "no price" in side and "inflation" in side
    assert 'id="spend"' in html
    md = (run_dir / "report.md").read_text()
    assert "### Service tiers side by side" in md and "### Tokens, spend and budget" in md
    for path in run_dir.rglob("*"):  # the rehearsal key appears nowhere in the run folder
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
