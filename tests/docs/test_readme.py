"""The README is what a newcomer reads first: the two commands of a fresh clone before anything
else, then a short tour and links, in at most 800 words; reference lives in docs/."""

from __future__ import annotations

import re

from tests.e2e.support import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
WORDS_MAX = 800


def test_the_readme_is_at_most_800_words() -> None:
    words = len(re.findall(r"\S+", README))
    assert words <= WORDS_MAX, f"README.md has {words} words; move reference to docs/"


def test_the_readme_starts_with_the_commands_of_a_fresh_clone() -> None:
    first_block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    assert README.split("```sh\n", 1)[0].strip() == "# paycore"
    assert [line.split()[0] for line in first_block.splitlines()][:2] == ["./scripts/dev", "./scripts/test"]


def test_every_docs_page_is_linked_from_the_readme_or_a_page_it_links() -> None:
    """A page nobody links to is a page nobody reads: each of docs/*.md is reachable in two steps."""
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", README))
    reachable = set(linked)
    for name in linked:
        page = (REPO_ROOT / "docs" / name).read_text(encoding="utf-8")
        reachable |= set(re.findall(r"\]\(([\w-]+\.md)", page))
    pages = {path.name for path in (REPO_ROOT / "docs").glob("*.md")}
    assert pages - reachable == set()
