"""Reading the processor's settlement report (docs/sandbox.md, "The settlement report"), one
line at a time, whatever the file's size (ADR 0014).

`read(lines)` yields each data line as a `Line` (every field checked and typed) or, when a
field is wrong, as a `Malformed` with its line number and what is wrong: a bad line is a
finding (`malformed_line`), not a reason to stop. What makes the whole input unusable (no
header, another header, a line that is not UTF-8 text) raises `NotAReport` before the first
line is yielded or where it is met, with a one-line message naming the line.

A report is UTF-8 text (issue 29): a byte-order mark before its header is skipped, and its lines
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
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final

from paycore.kit import clock
from paycore.processor.port import SETTLEMENT_REPORT_COLUMNS

HEADER: Final = SETTLEMENT_REPORT_COLUMNS
# The statuses each line type can have: charges and refunds as the processor saw them when the
# report was read; payout lines are events (a settlement, a return).
STATUSES_BY_TYPE: Final[dict[str, frozenset[str]]] = {
    "charge": frozenset({"succeeded", "failed", "pending"}),
    "refund": frozenset({"succeeded", "failed", "pending"}),
    "payout": frozenset({"settled"}),
    "payout_return": frozenset({"returned"}),
}
FIELD_LENGTH_MAX: Final = 256  # characters in one field; the longest real one is an id or a time
AMOUNT_MINOR_MAX: Final = 2**53 - 1  # as everywhere in paycore's API
_MINOR = re.compile(r"0|[1-9][0-9]{0,15}")
_CURRENCY = re.compile(r"[A-Z]{3}")
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
ENCODING: Final = "utf-8"
UNDECODABLE: Final = "surrogateescape"  # a byte that is not UTF-8 becomes U+DC80..U+DCFF
BYTE_ORDER_MARK: Final = "\ufeff"  # UTF-8's EF BB BF, decoded
_UNDECODED = re.compile("[\udc80-\udcff]")
_UTF16_MARKS: Final = ("\udcff\udcfe", "\udcfe\udcff")  # FF FE and FE FF, undecoded
CHECK_BLOCK_BYTES: Final = 1_048_576  # read at a time when a file is checked whole


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
    reader = csv.reader(_text(lines), strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise NotAReport("the report is empty: a settlement report starts with its header line") from None
    except csv.Error as error:
        raise NotAReport(f"line 1 is not CSV ({error})") from None
    if tuple(header) != HEADER:
        raise NotAReport(f"line 1 is not a settlement report's header: expected {','.join(HEADER)}")
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:  # e.g. an unterminated quote at the end of a truncated file
            yield Malformed(reader.line_num, f"not CSV: {error}", ())
            continue
        if not fields:
            continue  # a blank line
        yield parse(reader.line_num, tuple(fields))


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


def parse(number: int, fields: tuple[str, ...]) -> Line | Malformed:
    """One data line: a `Line`, or a `Malformed` naming its first wrong field."""
    if len(fields) != len(HEADER):
        return Malformed(number, f"{len(fields)} fields, a report line has {len(HEADER)}", fields)
    too_long = next((name for name, value in zip(HEADER, fields, strict=True) if len(value) > FIELD_LENGTH_MAX), None)
    if too_long is not None:
        return Malformed(number, f"{too_long} is longer than {FIELD_LENGTH_MAX} characters", fields[:1])
    values = dict(zip(HEADER, fields, strict=True))
    kind = values["type"]
    if kind not in STATUSES_BY_TYPE:
        return Malformed(number, f"type {kind!r} is not one of {', '.join(STATUSES_BY_TYPE)}", fields)
    for name in ("request_id", "processor_id", "merchant_id"):
        if not _ID.fullmatch(values[name]):
            return Malformed(number, f"{name} {values[name]!r} is not an id", fields)
    for name in ("amount_minor", "fee_minor"):
        if not _MINOR.fullmatch(values[name]) or int(values[name]) > AMOUNT_MINOR_MAX:
            return Malformed(number, f"{name} {values[name]!r} is not a whole number of minor units", fields)
    if not _CURRENCY.fullmatch(values["currency"]):
        return Malformed(number, f"currency {values['currency']!r} is not an ISO 4217 code", fields)
    if values["status"] not in STATUSES_BY_TYPE[kind]:
        return Malformed(number, f"status {values['status']!r} is not one a {kind} line has", fields)
    try:
        created_at_us = clock.parse_rfc3339(values["created_at"])
    except ValueError:
        return Malformed(number, f"created_at {values['created_at']!r} is not an RFC 3339 time", fields)
    return Line(
        number=number,
        type=kind,
        request_id=values["request_id"],
        processor_id=values["processor_id"],
        merchant_id=values["merchant_id"],
        amount_minor=int(values["amount_minor"]),
        fee_minor=int(values["fee_minor"]),
        currency=values["currency"],
        status=values["status"],
        created_at_us=created_at_us,
        batch_id=values["batch_id"] or None,
        code=values["code"] or None,
        fields=fields,
    )
