"""Issue 31: the report's lines are split without the csv module when they can be (no quote, no
line break inside), and read as staging rows without a `Line` each. Both must change nothing:
compared here with `csv.reader(strict=True)` and with `read`, over many seeded random reports
made of the characters that matter to CSV (quotes, commas, CR, LF, blank lines)."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Iterator

from paycore.reconciliation import report
from paycore.reconciliation.report import HEADER, Line, Malformed

GOOD = "charge,pay_1,ch_1,acme,2500,103,USD,succeeded,2024-11-25T16:00:00.123456Z,,"
PIECES = ('"', ",", "\r", "\n", "\r\n", "a", " ", '""', "x,y", "12.5", "-5", "Z", GOOD, "", "payout", "settled")
ENDINGS = ("\r\n", "\n", "", "\r")
REPORTS = 3_000


def csv_records(lines: list[str]) -> Iterator[tuple[int, list[str] | str]]:
    """What the csv module reads: (line number, fields or the error's text), blank lines too."""
    reader = csv.reader(iter(lines), strict=True)
    while True:
        try:
            fields: list[str] | str = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            fields = str(error)
        yield reader.line_num, fields


def random_report(rng: random.Random) -> list[str]:
    lines = [",".join(HEADER) + rng.choice(ENDINGS)] if rng.random() < 0.9 else []
    for _ in range(rng.randint(0, 6)):
        if rng.random() < 0.5:
            fields = GOOD.split(",")
            fields[rng.randrange(len(fields))] = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3)))
            text = ",".join(fields)
        else:
            text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 5)))
        lines.append(text + rng.choice(ENDINGS))
    return lines if rng.random() < 0.5 else list(io.StringIO("".join(lines), newline=""))


def test_the_records_are_what_the_csv_module_reads() -> None:
    rng = random.Random(31)
    for _ in range(REPORTS):
        lines = random_report(rng)
        records = report._records(iter(lines))
        ours = [(number, fields if isinstance(fields, list) else str(fields)) for number, fields in records]
        assert ours == list(csv_records(lines)), lines


def test_a_staged_line_is_the_line_read() -> None:
    rng = random.Random(29)
    for _ in range(REPORTS):
        lines = random_report(rng)
        try:
            read = list(report.read(lines))
        except report.NotAReport as refused:
            try:
                list(report.read_staged(lines))
            except report.NotAReport as also:
                assert str(also) == str(refused)
                continue
            raise AssertionError(f"read_staged did not refuse {lines!r}") from None
        staged = list(report.read_staged(lines))
        assert len(staged) == len(read)
        for as_line, as_row in zip(read, staged, strict=True):
            if isinstance(as_line, Malformed):
                assert as_row == as_line
            else:
                assert isinstance(as_line, Line) and not isinstance(as_row, Malformed)
                assert report.line_of(as_row) == as_line
                assert report.created_at_us_of(as_row) == as_line.created_at_us
