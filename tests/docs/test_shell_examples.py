"""Every shell example of README.md and docs/ runs, as written, against a fresh server.

Per page: a fresh `paycore serve --dev` on a free port, on a fresh SQLite file (and sandbox
file), then the page's ```sh blocks in order in one `bash -e`, with `http://127.0.0.1:8000`
pointed at that port and `http://127.0.0.1:8100` (the sandbox processor) at the same server's
`/sandbox`. A command that fails, or a shown result line the commands did not print, fails the
page. `paycore` is on the shell's PATH and `PAYCORE_DATABASE_URL` names the server's database,
as after `source .venv/bin/activate` on the page's database. The convention the pages follow is
in tests/docs/shell_examples.py; each block marked `<!-- not run: reason -->` is reported as a
skipped test with its reason, so `-ra` counts what ran and what did not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs import shell_examples
from tests.docs.shell_examples import Block, Shown, compare, extract, instrument, split_output
from tests.e2e.support import REPO_ROOT, ServerProcess, server_env, start_all

PAGE_TIMEOUT_S = 240
PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")])
TOOLS = ("bash", "curl", "jq", "python3")


# The README starts with the commands of a fresh clone, and nothing may stand before them.
FRESH_CLONE = (
    "the commands of a fresh clone: ./scripts/test is the suite itself, ./scripts/dev the server this test starts"
)


def _page_blocks(page: Path) -> list[Block]:
    blocks = extract(page, page.read_text())
    if page.name == "README.md" and page.parent == REPO_ROOT and blocks and blocks[0].not_run is None:
        blocks[0].not_run = FRESH_CLONE
    return blocks


def _blocks() -> list[Block]:
    return [block for page in PAGES for block in _page_blocks(page)]


def _name(page: Path) -> str:
    return str(page.relative_to(REPO_ROOT))


RUN_PAGES = sorted({block.path for block in _blocks() if block.not_run is None})
NOT_RUN = [block for block in _blocks() if block.not_run is not None]


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[ServerProcess]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the examples need {', '.join(missing)} on PATH (.ci/run installs them)", pytrace=False)
    database_url = f"sqlite:///{tmp_path / 'paycore.db'}"
    env = server_env(database_url, PAYCORE_SANDBOX_DATABASE_URL=f"sqlite:///{tmp_path / 'sandbox.db'}")
    server = ServerProcess(env, tmp_path / "serve.log", args=("--dev",))
    start_all([server])
    yield server
    server.stop()
    print(f"--- serve.log:\n{server.log()}")


def _run_id(page: Path) -> str:
    ran = sum(1 for block in _page_blocks(page) if block.not_run is None)
    return f"{_name(page)}, {ran} examples"


@pytest.mark.parametrize("page", RUN_PAGES, ids=_run_id)
def test_the_examples_of_a_page_run_and_print_what_they_show(
    page: Path, dev_server: ServerProcess, tmp_path: Path
) -> None:
    blocks = _page_blocks(page)
    script = instrument(blocks, dev_server.port)
    env = {
        **dev_server.env,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S,
        check=False,
    )
    where = result.stderr.strip().splitlines()
    assert result.returncode == 0, (
        f"an example of {_name(page)} failed (exit {result.returncode}); the last block started:\n"
        + "\n".join(line for line in where if line.startswith("example "))[-200:]
        + f"\nstderr:\n{result.stderr[-3000:]}\nstdout:\n{result.stdout[-3000:]}"
    )
    parts = split_output(result.stdout)
    shown = shell_examples.all_shown(blocks)
    failures = [failure for index, item in enumerate(shown) if (failure := compare(item, parts.get(index, [])))]
    assert not failures, f"{_name(page)}: {len(failures)} shown results differ:\n" + "\n".join(failures)
    ran = sum(1 for block in blocks if block.not_run is None)
    print(f"{_name(page)}: {ran} examples run, {len(shown)} shown results checked")


@pytest.mark.parametrize("block", NOT_RUN, ids=lambda block: f"{_name(block.path)}:{block.line}")
def test_an_example_marked_not_run_says_why(block: Block) -> None:
    assert block.not_run, "a block marked not run names its reason"
    pytest.skip(f"{_name(block.path)}:{block.line} not run: {block.not_run}")


# ---------------------------------------------------------------------------- the runner itself

PAGE = """Intro.

```sh
X=$(echo 41)
echo "{\\"n\\":$((X + 1)),\\"id\\":\\"pay_01abc\\"}"
# {"n":42,"id":"pay_01…"}

# prose, not checked
echo one; echo two
# one
#  more
```

<!-- not run: needs PostgreSQL -->

```sh
paycore serve
```

```text
# not an example
```
"""


def test_blocks_shown_results_and_reasons_are_read_as_the_convention_says() -> None:
    blocks = extract(Path("page.md"), PAGE)
    assert [(block.line, block.not_run) for block in blocks] == [(3, None), (16, "needs PostgreSQL")]
    instrument(blocks, 9999)
    assert blocks[0].shown == [Shown(6, ('{"n":42,"id":"pay_01…"}',)), Shown(10, ("onemore",))]


def test_a_shown_line_the_commands_did_not_print_is_a_difference() -> None:
    shown = Shown(6, ('{"n":42,"id":"pay_01…"}',))
    assert compare(shown, ['{"n":42,"id":"pay_01abc"}']) is None
    assert compare(shown, ['{"n":43,"id":"pay_01abc"}']) is not None
    assert compare(Shown(1, ("a", "b")), ["b", "a"]) is not None  # in order


def test_the_script_points_the_examples_at_the_test_server_and_cuts_the_output() -> None:
    block = Block(Path("p.md"), 1, ["curl -s http://127.0.0.1:8000/healthz", "# {}", "curl localhost:8100/v1/x"])
    script = instrument([block], 4321)
    assert "http://127.0.0.1:4321/healthz" in script
    assert "http://127.0.0.1:4321/sandbox/v1/x" in script
    result = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode != 0  # nothing listens on 4321: a failing command fails the page
    output = subprocess.run(
        ["bash", "-c", "echo a; printf '\\n@@paycore-example 0@@\\n'; echo b"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert split_output(output.stdout) == {0: ["a"], -1: ["b"]}
