"""The docs stand alone and serve a pip user: no path outside the repository, no link that leads nowhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHIPPED_TEXT = [REPO / "scenarios" / "traces" / "README.md", REPO / "scenarios" / "datasets" / "README.md",
                REPO / "NOTICE"]
CONTRIBUTOR_DOCS = {"development.md", "architecture.md"}  # a clone's side: make, tests/, engines/ belong there


@pytest.mark.parametrize("path", DOCS + SHIPPED_TEXT, ids=lambda p: p.name)
def test_no_file_outside_the_repository_is_cited(path: Path) -> None:
    text = path.read_text()
    assert not re.search(r"\bshared/|reference/(stacks|workloads)\.md|DESIGN\.md", text), path


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(path: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        assert (path.parent / target.split("#")[0]).exists(), f"{path.name}: {target}"


def test_the_readme_opens_with_the_pip_path() -> None:
    text = (REPO / "README.md").read_text()
    first = text[text.index("## Quick start"):text.index("## From a checkout")]
    assert "pip install" in first and "rushhour run demo" in first and "rushhour gate" in first
    assert not re.search(r"\bmake\b", first), "the pip path needs no Makefile"
    assert text.index("## Quick start") < text.index("make demo")


@pytest.mark.parametrize("path", [p for p in DOCS if p.name not in CONTRIBUTOR_DOCS], ids=lambda p: p.name)
def test_user_docs_send_no_one_into_the_test_suite(path: Path) -> None:
    text = path.read_text()
    assert "tests/real/scenarios" not in text, path
    assert "deploy/Dockerfile" not in text or "in a checkout" in text.lower(), path
