"""The code says what it does and why; which issue or commit asked for it is git's to say. A
newcomer reading `src/` meets no issue numbers or commit hashes they cannot look up."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\bissue\d+|(?<![\w/])#\d{2,}\b")
# A commit hash as one is quoted: 7 to 40 hex digits with at least one letter and one digit,
# written alone (not part of a longer word, a number or an identifier).
HASH = re.compile(r"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")


def _lines(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    return found


def test_no_issue_numbers_in_src() -> None:
    assert _lines(ISSUE) == []


def test_no_commit_hashes_in_src() -> None:
    assert _lines(HASH) == []


def test_the_patterns_find_what_they_look_for() -> None:
    assert ISSUE.search("(issue 28, ADR 0016)") and ISSUE.search("Issue 19: one lifecycle")
    assert ISSUE.search("see #123") and not ISSUE.search("SPEC §6.2, ADR 0030")
    assert HASH.search("measured on main (1cb5516)") and HASH.search("at 8296033a")
    assert not HASH.search("id pay_01abcdef12") and not HASH.search("2026120612") and not HASH.search("deadbeef")
