"""Every relative link of README.md and docs/ leads to a file that exists and, with an anchor,
to a heading of that file: moving a section (the README's API reference to docs/api.md) breaks
no link to it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.support import REPO_ROOT

PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for match in LINK.finditer(page.read_text()):
        target = match.group(1)
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such heading")
    return broken


def test_every_relative_link_of_the_docs_leads_somewhere() -> None:
    broken = {str(page.relative_to(REPO_ROOT)): found for page in PAGES if (found := broken_links(page))}
    assert broken == {}


def test_a_link_to_a_heading_that_moved_away_is_broken(tmp_path: Path) -> None:
    (tmp_path / "api.md").write_text("# The API\n\n## Payments\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](api.md#payments) [moved](#payments) [gone](ops.md)\n")
    assert broken_links(page) == ["#payments: no such heading", "ops.md: no such file"]
