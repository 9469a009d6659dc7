"""Every page of docs/ (the ADRs aside: they open with their Status) starts with its title, then
a summary of one to three lines of prose saying what the page is for and who reads it, so that a
newcomer can tell from its first lines whether to read on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.support import REPO_ROOT

DOCS = REPO_ROOT / "docs"
PAGES = sorted(page for page in DOCS.rglob("*.md") if "adr" not in page.relative_to(DOCS).parts)
NOT_PROSE = ("#", "|", "```", ">", "- ", "* ", "<", "    ")
MAX_LINES = 3


def summary_problem(text: str) -> str | None:
    """What is wrong with the page's opening, or None: a `# ` title, a blank line, then a paragraph
    of 1 to MAX_LINES lines of prose (not a heading, table, list, quote, code or HTML)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        return "the first line is not a `# ` title"
    if len(lines) < 3 or lines[1].strip():
        return "no blank line, then a summary, after the title"
    paragraph = []
    for line in lines[2:]:
        if not line.strip():
            break
        paragraph.append(line)
    if not paragraph:
        return "no summary after the title"
    if paragraph[0].startswith(NOT_PROSE) or (paragraph[0][:1].isdigit() and ". " in paragraph[0][:4]):
        return f"the title is followed by {paragraph[0][:20]!r}, not a summary"
    if len(paragraph) > MAX_LINES:
        return f"the summary has {len(paragraph)} lines, more than {MAX_LINES}"
    return None


def test_the_docs_pages_are_found() -> None:
    names = {page.name for page in PAGES}
    assert {"api.md", "benchmarks.md", "tour.md", "operations.md"} <= names
    assert not any(page.name.startswith("0001-") for page in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(DOCS)))
def test_every_docs_page_starts_with_a_title_and_a_short_summary(page: Path) -> None:
    assert summary_problem(page.read_text()) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Intro\n\nText.\n", "the first line is not a `# ` title"),
        ("# Title\nText.\n", "no blank line, then a summary, after the title"),
        ("# Title\n\n## Section\n", "the title is followed by '## Section', not a summary"),
        ("# Title\n\n| a | b |\n", "the title is followed by '| a | b |', not a summary"),
        ("# Title\n\n- a list\n", "the title is followed by '- a list', not a summary"),
        ("# Title\n\n> **Status**: built.\n", "the title is followed by '> **Status**: built.', not a summary"),
        ("# Title\n\n1. first\n", "the title is followed by '1. first', not a summary"),
        ("# Title\n\nOne.\nTwo.\nThree.\nFour.\n\nMore.\n", "the summary has 4 lines, more than 3"),
        ("# Title\n\n\nText.\n", "no summary after the title"),
    ],
)
def test_a_page_without_a_short_summary_is_refused(text: str, problem: str) -> None:
    assert summary_problem(text) == problem


def test_a_title_then_up_to_three_lines_is_a_summary() -> None:
    assert summary_problem("# Title\n\nFor operators: what this page is for.\n\n## Section\n") is None
    assert summary_problem("# Title\n\nOne,\ntwo,\nthree lines.\n") is None
