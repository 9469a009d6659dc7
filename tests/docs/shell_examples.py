"""The shell examples of README.md and docs/: found, run in one `bash -e` per page, and checked.

The convention every page follows (docs/testing.md, "Examples that run"):

- A fenced block whose language is `sh` is an example, run as written. A block that cannot run
  against a fresh `paycore serve --dev` is preceded by `<!-- not run: <reason> -->` (blank lines
  between are allowed); any other language (`text`, `console`, `json`) is not an example.
- A page's examples run in order in one shell, so an id captured into a variable in one block
  (`PAY=$(curl ... | jq -r .id)`) fills the placeholder of a later one, for a person too.
- The comment lines directly under a command (no blank line between) are what it prints, one
  `# ` line per output line; a line starting `#  ` (two or more spaces) continues the line above.
  `…` stands for any text. Each shown line must equal an output line of the commands since the
  previous shown result, in order. A comment after a blank line is prose and is not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.+?)\s*-->")
FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")
MARKER = "@@paycore-example {index}@@"
MARKER_LINE = re.compile(r"^@@paycore-example (?P<index>\d+)@@$")
# The addresses the examples call, and where they lead on the test's server.
DEV_ADDRESSES = ("http://127.0.0.1:8000", "http://localhost:8000", "127.0.0.1:8000", "localhost:8000")
SANDBOX_ADDRESSES = ("http://127.0.0.1:8100", "http://localhost:8100", "127.0.0.1:8100", "localhost:8100")


@dataclass(frozen=True)
class Shown:
    """The lines a command is shown to print, and where they are (page line)."""

    line: int
    expected: tuple[str, ...]


@dataclass
class Block:
    path: Path
    line: int  # the fence's line, 1-based
    code: list[str]
    not_run: str | None = None
    shown: list[Shown] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def extract(path: Path, text: str) -> list[Block]:
    """Every ```sh block of a page, with the reason it is not run when one is given."""
    blocks: list[Block] = []
    lines = text.splitlines()
    reason: str | None = None
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            found = NOT_RUN.search(lines[index])
            if found is not None:
                reason = found.group("reason")
            elif lines[index].strip():
                reason = None
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if match.group("lang") == "sh":
            blocks.append(Block(path, index + 1, lines[index + 1 : end], reason))
        reason = None
        index = end + 1
    return blocks


def is_command(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def instrument(blocks: list[Block], port: int) -> str:
    """One bash script for a page's runnable blocks: its addresses pointed at the test's server,
    a marker printed before each shown result (so the output can be cut into the commands'
    parts) and each block's place on standard error. Fills each block's `shown`."""
    out: list[str] = []
    count = 0
    for block in blocks:
        if block.not_run is not None:
            continue
        out.append(f"echo 'example {block.where}' >&2")
        after_command = in_result = False
        for number, raw in enumerate(block.code):
            comment = raw.lstrip().startswith("#")
            if comment and (after_command or in_result):
                if not in_result:
                    block.shown.append(Shown(block.line + 1 + number, ()))
                    out.append(f"printf '\\n{MARKER.format(index=count)}\\n'")
                    count += 1
                    in_result = True
                last = block.shown[-1]
                block.shown[-1] = Shown(last.line, _add_line(last.expected, raw))
                continue
            in_result = False
            after_command = is_command(raw)
            out.append(_rewrite(raw, port))
    return "\n".join(out) + "\n"


def all_shown(blocks: list[Block]) -> list[Shown]:
    return [shown for block in blocks for shown in block.shown]


def _add_line(expected: tuple[str, ...], raw: str) -> tuple[str, ...]:
    text = raw.lstrip()[1:]
    if text.startswith("  ") and expected:
        return (*expected[:-1], expected[-1] + text.strip())
    return (*expected, text[1:] if text.startswith(" ") else text)


def _rewrite(line: str, port: int) -> str:
    for address in SANDBOX_ADDRESSES:
        line = line.replace(address, f"http://127.0.0.1:{port}/sandbox")
    for address in DEV_ADDRESSES:
        line = line.replace(address, f"http://127.0.0.1:{port}")
    return line


def split_output(output: str) -> dict[int, list[str]]:
    """The output lines before each marker, by the index of the shown result that follows."""
    parts: dict[int, list[str]] = {}
    current: list[str] = []
    for line in output.splitlines():
        match = MARKER_LINE.match(line.strip())
        if match is None:
            if line.strip():
                current.append(line.strip())
            continue
        parts[int(match.group("index"))] = current
        current = []
    parts[-1] = current  # after the last marker: output no shown result covers
    return parts


def matches(expected: str, actual: str) -> bool:
    """The shown line is the output line, or its end after a JSON body printed without a
    newline (`curl -s` prints none: the next command's output follows on the same line)."""
    pattern = re.compile(".*?".join(re.escape(piece) for piece in expected.strip().split("…")), re.DOTALL)
    actual = actual.strip()
    starts = [0, *(index for index in range(1, len(actual)) if actual[index - 1] in "}]")]
    return any(pattern.fullmatch(actual, start) for start in starts)


def compare(shown: Shown, actual: list[str]) -> str | None:
    """None when every shown line is an output line, in order; else what differs."""
    position = 0
    for expected in shown.expected:
        while position < len(actual) and not matches(expected, actual[position]):
            position += 1
        if position == len(actual):
            printed = "\n".join(f"    {line}" for line in actual) or "    (nothing)"
            return f"line {shown.line}: shown\n    {expected}\nnot among what the commands printed:\n{printed}"
        position += 1
    return None
