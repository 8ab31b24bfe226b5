"""The HTML report in headless Debian chromium: offline, no errors, charts drawn, hostile text inert."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rushhour.audit.summary import Summary
from rushhour.reports import write_reports

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOSTILE_TIER = "bat</script><script>alert(9)</script>ch"

CANVAS_HAS_INK = """() => Array.from(document.querySelectorAll('[data-chart]')).map(el => {
  const canvases = Array.from(el.querySelectorAll('canvas'));
  const ink = canvases.some(c => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) return true;
    return false;
  });
  return {kind: el.dataset.chart, rendered: el.dataset.rendered === '1', canvases: canvases.length, ink};
})"""


@dataclass
class Visit:
    page: Any
    problems: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Debian chromium is required at {CHROMIUM} for browser tests")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def visit(browser: Any, html: Path) -> Visit:
    page = browser.new_page(viewport={"width": 1320, "height": 1000})
    v = Visit(page)
    page.on(
        "console",
        lambda m: v.problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda e: v.problems.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: v.problems.append(f"request failed: {r.url}"))
    page.on("request", lambda r: v.requests.append(r.url))

    def on_dialog(d: Any) -> None:
        v.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)
    page.goto(html.resolve().as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(200)
    return v


def assert_clean(v: Visit) -> None:
    assert v.problems == []
    assert v.dialogs == []
    assert all(u.startswith(("file:", "data:")) for u in v.requests), v.requests


def test_report_loads_and_draws(browser: Any, summary: Summary, tmp_path: Path) -> None:
    paths = write_reports(summary, tmp_path)
    v = visit(browser, paths["html"])
    assert_clean(v)
    charts = v.page.evaluate(CANVAS_HAS_INK)
    kinds = sorted(c["kind"] for c in charts)
    assert kinds == ["cdf", "offered", "served-dropped", "served-dropped", "served-dropped", "server", "ttft"]
    assert all(c["rendered"] and c["canvases"] >= 1 and c["ink"] for c in charts), charts
    assert v.page.locator("#outcome-bars rect").count() >= 3 + 8
    assert v.page.locator("#breaker-strips rect").count() == 4
    row = v.page.locator("#glance tr[data-tier='batch']")
    assert row.locator("[data-col='requests']").inner_text() == "2\u202f400"
    assert row.locator("[data-col='429']").inner_text() == "720"
    assert "31 %" in row.locator("[data-col='unserved']").inner_text()
    assert v.page.locator("#glance tr[data-tier='interactive'] [data-col='ttft-p99']").inner_text() == "2.10 s"
    assert v.page.locator("#badge").inner_text() == "FAIL"
    shot = tmp_path / "report.png"
    v.page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 50_000
    v.page.close()


def test_hostile_text_is_shown_never_run(browser: Any, summary: Summary, tmp_path: Path) -> None:
    batch = summary.tier("batch")
    tiers = [t if t.name != "batch" else t.model_copy(update={"name": HOSTILE_TIER}) for t in summary.tiers]
    series = dict(summary.timeline.tiers)
    series[HOSTILE_TIER] = series.pop("batch")
    evidence = [e if e.tier != "batch" else e.model_copy(update={"tier": HOSTILE_TIER}) for e in summary.evidence]
    hostile = summary.model_copy(
        update={
            "tiers": tiers,
            "evidence": evidence,
            "timeline": summary.timeline.model_copy(update={"tiers": series}),
        }
    )
    assert batch.name == "batch"
    v = visit(browser, write_reports(hostile, tmp_path)["html"])
    assert_clean(v)
    assert v.page.evaluate("() => document.querySelectorAll('script').length") == 3
    text = v.page.locator("#evidence").inner_text()
    assert "<script>alert(1)</script> upstream said </script><img src=x onerror=alert(2)>" in text
    assert "</script><script>alert(3)</script>" in text
    assert HOSTILE_TIER in v.page.locator("#glance").inner_text()
    assert v.page.locator("#evidence img").count() == 0
    legends = v.page.locator(".u-legend").all_inner_texts()
    assert any(HOSTILE_TIER in t for t in legends)
    assert all(c["ink"] for c in v.page.evaluate(CANVAS_HAS_INK))
    v.page.close()


def test_edge_report_loads(browser: Any, edge: Summary, tmp_path: Path) -> None:
    v = visit(browser, write_reports(edge, tmp_path)["html"])
    assert_clean(v)
    assert v.page.locator("#invalid-banner").is_visible()
    assert v.page.locator("#badge").inner_text() == "INVALID"
    assert v.page.locator("#no-fallback").is_visible()
    charts = v.page.evaluate(CANVAS_HAS_INK)
    assert {c["kind"] for c in charts} == {"cdf", "offered", "served-dropped", "ttft"}
    assert all(c["rendered"] and c["ink"] for c in charts), charts
    assert v.page.locator("#glance tr[data-tier='idle'] [data-col='requests']").inner_text() == "0"
    v.page.screenshot(path=str(tmp_path / "edge.png"), full_page=True)
    v.page.close()
