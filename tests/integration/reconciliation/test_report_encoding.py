"""Issue 29 item 6, on both databases: a settlement report is UTF-8 text. A UTF-8 byte-order
mark at its start and CRLF line ends are accepted, from a file, from standard input and from the
processor (`--day`); a report in another encoding (Latin-1 bytes, UTF-16) is refused with exit 1
and one line naming the first line that is not UTF-8, and nothing is written, wherever that
line is in a file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import Response
from typer.testing import CliRunner, Result

from paycore.cli.main import app
from paycore.reconciliation.report import HEADER
from tests.integration.payments.conftest import Env
from tests.integration.reconciliation.test_reconcile import counts, paid, report, today
from tests.support.servers import serve_in_thread

BOM = b"\xef\xbb\xbf"
LINES = 1_200  # more than two chunks of 500


@pytest.fixture
def transport() -> str:
    return "inprocess"


def cli(env: Env, *arguments: str, stdin: bytes | None = None, processor_url: str | None = None) -> Result:
    variables = {"PAYCORE_DATABASE_URL": env.settings.database_url, "COLUMNS": "200"}
    if processor_url is not None:
        variables |= {"PAYCORE_PROCESSOR_URL": processor_url, "PAYCORE_PROCESSOR_TIMEOUT_MS": "2000"}
    return CliRunner().invoke(app, ["reconcile", *arguments], env=variables, input=stdin, catch_exceptions=False)


def crlf_bytes(lines: list[str]) -> bytes:
    """The report as bytes with CRLF line ends (as the sandbox writes it), checked."""
    data = "".join(lines).encode()
    assert data.count(b"\r\n") == len(lines) == data.count(b"\n")
    return data


def one_line(result: Result) -> str:
    said = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("{")]
    assert len(said) == 1, result.stderr
    assert "Traceback" not in result.output
    return said[0]


def long_report(latin1_at: int | None = None) -> bytes:
    """A report of unknown failed charges (they move no money: no break), Latin-1 on one line."""
    lines = [",".join(HEADER).encode() + b"\r\n"]
    for number in range(LINES):
        line = f"charge,pay_{number:06d},ch_{number:06d},default,1000,0,USD,failed,{today()}T10:00:00Z,,\r\n"
        lines.append(line.encode())
    if latin1_at is not None:  # line numbers count the header as line 1
        lines[latin1_at - 1] = lines[latin1_at - 1].replace(b"ch_", "ch_caf\u00e9_".encode("latin-1"))
    return b"".join(lines)


@contextmanager
def processor_serving(body: bytes) -> Iterator[str]:
    """A processor whose settlement report of any day is `body`, as bytes on the wire."""
    processor = FastAPI()

    @processor.get("/v1/settlements/{day}.csv")
    def settlement(day: str) -> Response:
        return Response(body, media_type="text/csv; charset=utf-8")

    with serve_in_thread(processor) as base_url:
        yield base_url


# --- accepted -------------------------------------------------------------------------------


def test_a_file_with_a_byte_order_mark_and_crlf_line_ends_is_reconciled(env: Env, tmp_path: Path) -> None:
    paid(env)
    paid(env, amount_minor=900)
    path = tmp_path / "report.csv"
    path.write_bytes(BOM + crlf_bytes(report(env)))

    result = cli(env, "--report", str(path))

    assert result.exit_code == 0, result.output
    assert "lines read 2, matched 2, resolved 0" in result.stdout
    assert "new breaks: none" in result.stdout


def test_standard_input_with_a_byte_order_mark_and_crlf_line_ends_is_reconciled(env: Env) -> None:
    paid(env)

    result = cli(env, "--report", "-", stdin=BOM + crlf_bytes(report(env)))

    assert result.exit_code == 0, result.output
    assert "lines read 1, matched 1, resolved 0" in result.stdout
    assert "new breaks: none" in result.stdout


def test_a_report_the_processor_sends_with_a_byte_order_mark_is_reconciled(env: Env) -> None:
    paid(env)
    with processor_serving(BOM + crlf_bytes(report(env))) as url:
        result = cli(env, "--day", today(), processor_url=url)

    assert result.exit_code == 0, result.output
    assert "lines read 1, matched 1, resolved 0" in result.stdout


# --- refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [3, 900])  # in the first chunk, and well after it
def test_a_latin1_file_is_refused_naming_its_line_and_nothing_is_written(env: Env, tmp_path: Path, line: int) -> None:
    path = tmp_path / "report.csv"
    path.write_bytes(long_report(latin1_at=line))

    result = cli(env, "--report", str(path))

    assert result.exit_code == 1, result.output
    said = one_line(result)
    assert f"line {line} is not UTF-8" in said and "byte 0xe9" in said, said
    assert counts(env) == (0, 0)


def test_latin1_on_standard_input_is_refused_naming_its_line_and_nothing_is_written(env: Env) -> None:
    result = cli(env, "--report", "-", stdin=long_report(latin1_at=900))

    assert result.exit_code == 1, result.output
    assert "line 900 is not UTF-8" in one_line(result)
    assert counts(env) == (0, 0)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"])  # with its byte-order mark, and without
def test_a_utf16_file_is_refused_in_one_line_and_nothing_is_written(env: Env, tmp_path: Path, encoding: str) -> None:
    paid(env)
    path = tmp_path / "report.csv"
    path.write_bytes("".join(report(env)).encode(encoding))

    result = cli(env, "--report", str(path))

    assert result.exit_code == 1, result.output
    said = one_line(result)
    assert "line 1" in said and "UTF-16" in said, said
    assert counts(env) == (0, 0)


def test_a_report_the_processor_sends_in_latin1_is_refused_naming_its_line(env: Env) -> None:
    with processor_serving(long_report(latin1_at=3)) as url:
        result = cli(env, "--day", today(), processor_url=url)

    assert result.exit_code == 1, result.output
    assert "line 3 is not UTF-8" in one_line(result)
    assert counts(env) == (0, 0)
