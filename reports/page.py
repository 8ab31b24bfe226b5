"""The page kit every many-run report shares: the template environment, the inlined CSS, tier colours, the writer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import jinja2
from pydantic import BaseModel

from rushhour.reports import fmt
from rushhour.reports.html import TEMPLATES, environment, inline_asset


def colours_for(names: Sequence[str]) -> dict[str, str]:
    """Each tier's colour, in the order given (the palette every report uses)."""
    return {n: fmt.TIER_PALETTE[i % len(fmt.TIER_PALETTE)] for i, n in enumerate(names)}


def page_env() -> jinja2.Environment:
    """The reports' template environment (autoescaping, strict undefined, the number filters)."""
    return environment()


def page_css() -> str:
    """The reports' stylesheet, checked safe to inline."""
    return inline_asset(TEMPLATES / "report.css")


def write_pages(result: BaseModel, root: Path, stem: str, html: str, markdown: str) -> dict[str, Path]:
    """Write <stem>.json, <stem>.html and <stem>.md into ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    paths = {"json": root / f"{stem}.json", "html": root / f"{stem}.html", "markdown": root / f"{stem}.md"}
    paths["json"].write_text(json.dumps(result.model_dump(mode="json", by_alias=True), indent=2))
    paths["html"].write_text(html, encoding="utf-8")
    paths["markdown"].write_text(markdown, encoding="utf-8")
    return paths
