"""Regenerate the README's screenshot from the demo: `python docs/demo_screenshot.py [--run-dir DIR]`.

Runs `rushhour run demo` into a temporary folder (or takes an existing run folder), opens its report.html in
headless Debian chromium through Playwright and writes docs/demo-report.png (the first 1280 × 1800 pixels:
the verdict, the per-tier table and the SLO checks). Needs the dev extra (playwright) and /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
OUTPUT = DOCS / "demo-report.png"
CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 1800


def run_demo(out: Path) -> Path:
    """A fresh demo run under ``out``; its run folder."""
    subprocess.run([sys.executable, "-m", "rushhour.cli", "run", "demo", "--out", str(out)], check=True)
    (report,) = out.glob("*/report.html")
    return report.parent


def screenshot(run_dir: Path, output: Path = OUTPUT) -> Path:
    """The top of the run's report.html as a PNG."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto((run_dir / "report.html").resolve().as_uri())
        page.wait_for_load_state("load")
        page.wait_for_timeout(500)  # the charts draw after load
        page.screenshot(path=str(output))
        browser.close()
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="screenshot this run folder instead of running the demo")
    args = parser.parse_args(argv)
    if args.run_dir is not None:
        print(screenshot(args.run_dir))
        return 0
    with tempfile.TemporaryDirectory(prefix="rushhour-demo-") as tmp:
        print(screenshot(run_demo(Path(tmp))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
