"""Reading the processor's settlement report (docs/sandbox.md, "The settlement report"), one
line at a time, whatever the file's size (ADR 0014).

`read(lines)` yields each data line as a `Line` (every field checked and typed) or, when a
field is wrong, as a `Malformed` with its line number and what is wrong: a bad line is a
finding (`malformed_line`), not a reason to stop. What makes the whole input unusable (no
header, another header, a line that is not UTF-8 text) raises `NotAReport` before the first
line is yielded or where it is met, with a one-line message naming the line.

A report is UTF-8 text: a byte-order mark before its header is skipped, and its lines
end in CRLF or LF. `opened(raw)` reads bytes as paycore reads every report: UTF-8, line ends
kept, and a byte that is not UTF-8 kept (as a lone surrogate, Python's `surrogateescape`) so
that `read` can name the line it is on instead of failing somewhere in a decoder. A stream that
can be read twice (a file) is checked whole first, so that such a line anywhere in it refuses
the file before anything is written.
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

from paycore.kit import clock
from paycore.kit.numbers import InvalidNumber, parse_digits
from paycore.processor.port import SETTLEMENT_REPORT_COLUMNS

HEADER: Final = SETTLEMENT_REPORT_COLUMNS
# The statuses each line type can have: charges and refunds as the processor saw them when the
# report was read; payout and dispute lines are events (a settlement, a return, a withdrawal...).
STATUSES_BY_TYPE: Final[dict[str, frozenset[str]]] = {
    "charge": frozenset({"succeeded", "failed", "pending"}),
    "refund": frozenset({"succeeded", "failed", "pending"}),
    "payout": frozenset({"settled"}),
    "payout_return": frozenset({"returned"}),
    # A dispute's money (SPEC §6.2): events, as payout lines are; request id the charge's,
    # processor id the dispute's, code its reason.
    "dispute_withdrawal": frozenset({"withdrawn"}),
    "dispute_fee": frozenset({"charged"}),
    "dispute_reinstatement": frozenset({"reinstated"}),
}
FIELD_LENGTH_MAX: Final = 256  # characters in one field; the longest real one is an id or a time
AMOUNT_MINOR_MAX: Final = 2**53 - 1  # as everywhere in paycore's API
AMOUNT_CHARS_MAX: Final = len(str(AMOUNT_MINOR_MAX))
_CURRENCY = re.compile(r"[A-Z]{3}")
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
ENCODING: Final = "utf-8"
UNDECODABLE: Final = "surrogateescape"  # a byte that is not UTF-8 becomes U+DC80..U+DCFF
BYTE_ORDER_MARK: Final = "\ufeff"  # UTF-8's EF BB BF, decoded
_UNDECODED = re.compile("[\udc80-\udcff]")
_UTF16_MARKS: Final = ("\udcff\udcfe", "\udcfe\udcff")  # FF FE and FE FF, undecoded
CHECK_BLOCK_BYTES: Final = 1_048_576  # read at a time when a file is checked whole


# A good line as a run stages it: (number, type, request id, processor id, merchant, amount_minor,
# fee_minor, currency, status, created_at, batch_id, code), the amounts as integers.
Staged = tuple[Any, ...]


class NotAReport(ValueError):
    """The input is not a settlement report: nothing of it may be applied."""


@dataclass(frozen=True)
class Line:
    number: int  # 1 is the header
    type: str
    request_id: str
    processor_id: str
    merchant_id: str
    amount_minor: int
    fee_minor: int
    currency: str
    status: str
    created_at_us: int
    batch_id: str | None
    code: str | None
    fields: tuple[str, ...]  # the line as read


@dataclass(frozen=True)
class Malformed:
    number: int
    reason: str
    fields: tuple[str, ...]


def opened(raw: BinaryIO) -> io.TextIOWrapper:
    """The report in `raw` (bytes) as text lines, as `read` takes them (see the module). A
    stream that can be read twice is checked whole, then rewound: NotAReport for its first line
    that is not UTF-8, before the caller has written anything. One read as it arrives (a pipe)
    is checked as `read` reaches each line. The caller owns `raw` (detach the wrapper to keep it)."""
    if raw.seekable():
        start = raw.tell()
        clean = _utf8_without_nul(raw)
        raw.seek(start)
        if not clean:  # find the line and say what is wrong with it, as `read` would
            text = _wrapped(raw)
            try:
                for _ in _text(text):
                    pass
            finally:
                text.detach()
            raw.seek(start)
    return _wrapped(raw)


def _wrapped(raw: BinaryIO) -> io.TextIOWrapper:
    return io.TextIOWrapper(raw, encoding=ENCODING, errors=UNDECODABLE, newline="")


def _utf8_without_nul(raw: BinaryIO) -> bool:
    """Whether the rest of `raw` is UTF-8 with no NUL byte: decoded a block at a time (a report of
    a million lines in a fraction of a second), kept nowhere."""
    decoder = codecs.getincrementaldecoder(ENCODING)()
    try:
        while block := raw.read(CHECK_BLOCK_BYTES):
            if b"\x00" in block:
                return False
            decoder.decode(block)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def encoded(line: str) -> bytes:
    """A line as it was read, byte for byte (the report's SHA-256 is of its bytes)."""
    return line.encode(ENCODING, UNDECODABLE)


def read(lines: Iterable[str]) -> Iterator[Line | Malformed]:
    """Each data line of the report in `lines` (text lines, CRLF or LF), in file order."""
    for number, fields in _data(lines):
        yield Malformed(number, f"not CSV: {fields}", ()) if isinstance(fields, csv.Error) else parse(number, fields)


def read_staged(lines: Iterable[str]) -> Iterator[Staged | Malformed]:
    """`read`, each good line as its staging row (`Staged`) rather than a `Line`: what a run
    writes into its staging table, without building a `Line` per line."""
    for number, fields in _data(lines):
        yield Malformed(number, f"not CSV: {fields}", ()) if isinstance(fields, csv.Error) else staged(number, fields)


def _data(lines: Iterable[str]) -> Iterator[tuple[int, list[str] | csv.Error]]:
    """(line number, fields or the CSV error) of each data line, after the header is checked
    (NotAReport); blank lines skipped."""
    records = _records(_text(lines))
    first = next(records, None)
    if first is None:
        raise NotAReport("the report is empty: a settlement report starts with its header line")
    header = first[1]
    if isinstance(header, csv.Error):
        raise NotAReport(f"line 1 is not CSV ({header})") from None
    if tuple(header) != HEADER:
        raise NotAReport(f"line 1 is not a settlement report's header: expected {','.join(HEADER)}")
    for number, fields in records:
        if fields:  # not a blank line
            yield number, fields


def _records(text: Iterator[str]) -> Iterator[tuple[int, list[str] | csv.Error]]:
    """The CSV records of the text lines as `csv.reader(text, strict=True)` reads them, each with
    the number of the last line it was read from, and a record's error in its place (the reader
    goes on with the next line, as csv's does). A line without a quote or a line break inside
    is split on its commas without the csv module, which is what it would do (a
    quarter of a line's cost); any other line starts a csv reader, which reads on as far as
    its record goes (a quoted field across lines)."""
    number = 0
    for line in text:
        body = line[:-2] if line.endswith("\r\n") else line[:-1] if line.endswith(("\n", "\r")) else line
        if '"' not in body and "\r" not in body and "\n" not in body and body:
            number += 1
            yield number, body.split(",")
            continue
        reader = csv.reader(itertools.chain((line,), text), strict=True)
        try:
            fields: list[str] | csv.Error = next(reader)
        except csv.Error as error:
            fields = error
        except StopIteration:
            return
        number += reader.line_num
        yield number, fields


def _text(lines: Iterable[str]) -> Iterator[str]:
    """The lines without the byte-order mark, each checked to be UTF-8 text (NotAReport naming
    the first that is not: read in another encoding, e.g. Latin-1 or UTF-16)."""
    for number, line in enumerate(lines, start=1):
        if number == 1:
            if line.startswith(_UTF16_MARKS):
                raise NotAReport("line 1 begins with a UTF-16 byte-order mark: a settlement report is UTF-8 text")
            line = line.removeprefix(BYTE_ORDER_MARK)
        undecoded = _UNDECODED.search(line)
        if undecoded is not None:
            byte = ord(undecoded.group()) - 0xDC00
            raise NotAReport(
                f"line {number} is not UTF-8 (byte 0x{byte:02x} at character {undecoded.start() + 1}): "
                "a settlement report is UTF-8 text"
            )
        if "\x00" in line:
            raise NotAReport(f"line {number} holds NUL bytes, as UTF-16 text does: a settlement report is UTF-8 text")
        yield line


def parse(number: int, fields: Sequence[str]) -> Line | Malformed:
    """One data line: a `Line`, or a `Malformed` naming its first wrong field."""
    checked = _checked(number, fields)
    if isinstance(checked, Malformed):
        return checked
    amount_minor, fee_minor, created_at_us = checked
    return Line(
        number=number,
        type=fields[0],
        request_id=fields[1],
        processor_id=fields[2],
        merchant_id=fields[3],
        amount_minor=amount_minor,
        fee_minor=fee_minor,
        currency=fields[6],
        status=fields[7],
        created_at_us=created_at_us,
        batch_id=fields[9] or None,
        code=fields[10] or None,
        fields=tuple(fields),
    )


def staged(number: int, fields: Sequence[str]) -> Staged | Malformed:
    """One data line as its staging row (the checks of `parse`), or a `Malformed`."""
    checked = _checked(number, fields)
    if isinstance(checked, Malformed):
        return checked
    return (number, fields[0], fields[1], fields[2], fields[3], checked[0], checked[1], *fields[6:])


def line_of(row: Staged) -> Line:
    """The `Line` of a staging row (read again: the same checks, the same values)."""
    number, kind, request_id, processor_id, merchant, amount_minor, fee_minor, *rest = row
    line = parse(number, (kind, request_id, processor_id, merchant, str(amount_minor), str(fee_minor), *rest))
    assert isinstance(line, Line), (row, line)  # it was one when it was staged
    return line


def created_at_us_of(row: Staged) -> int:
    return clock.parse_rfc3339(row[9])


def _checked(number: int, fields: Sequence[str]) -> tuple[int, int, int] | Malformed:
    """(amount_minor, fee_minor, created_at_us) of a good line, else what is wrong with it,
    checked in the order of the header; the common case takes no loop and no dict."""
    if len(fields) != len(HEADER):
        return Malformed(number, f"{len(fields)} fields, a report line has {len(HEADER)}", tuple(fields))
    if max(map(len, fields)) > FIELD_LENGTH_MAX:
        too_long = next(name for name, value in zip(HEADER, fields, strict=True) if len(value) > FIELD_LENGTH_MAX)
        return Malformed(number, f"{too_long} is longer than {FIELD_LENGTH_MAX} characters", tuple(fields[:1]))
    kind, request_id, processor_id, merchant_id, amount, fee, currency, status, created_at = fields[:9]
    if kind not in STATUSES_BY_TYPE:
        return Malformed(number, f"type {kind!r} is not one of {', '.join(STATUSES_BY_TYPE)}", tuple(fields))
    if not (_ID.fullmatch(request_id) and _ID.fullmatch(processor_id) and _ID.fullmatch(merchant_id)):
        name, value = next((n, v) for n, v in zip(HEADER[1:4], fields[1:4], strict=True) if not _ID.fullmatch(v))
        return Malformed(number, f"{name} {value!r} is not an id", tuple(fields))
    amount_minor, fee_minor = _minor(amount), _minor(fee)
    if amount_minor is None or fee_minor is None:
        name, value = ("amount_minor", amount) if amount_minor is None else ("fee_minor", fee)
        return Malformed(number, f"{name} {value!r} is not a whole number of minor units", tuple(fields))
    if not _CURRENCY.fullmatch(currency):
        return Malformed(number, f"currency {currency!r} is not an ISO 4217 code", tuple(fields))
    if status not in STATUSES_BY_TYPE[kind]:
        return Malformed(number, f"status {status!r} is not one a {kind} line has", tuple(fields))
    try:
        created_at_us = clock.parse_rfc3339(created_at)
    except ValueError:
        return Malformed(number, f"created_at {created_at!r} is not an RFC 3339 time", tuple(fields))
    return amount_minor, fee_minor, created_at_us


def _minor(value: str) -> int | None:
    """An amount as the report writes it (canonical ASCII digits: no sign, no leading zero), or None."""
    try:
        return parse_digits(value, maximum=AMOUNT_MINOR_MAX, chars_max=AMOUNT_CHARS_MAX, leading_zeros=False)
    except InvalidNumber:
        return None
