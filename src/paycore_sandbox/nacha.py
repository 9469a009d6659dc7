"""A NACHA (ACH) file of credit entries, written by hand: it is a fixed-width format, and
the few records a credit batch needs are easier to check here than a library.

Every record is 94 characters. A file is:

    1  file header
    5  batch header (service class 220: credits only; SEC code PPD or CCD)
    6  entry detail, one per payout (transaction code 22: credit to a checking account)
    8  batch control (entry count, entry hash, debit and credit totals)
    9  file control (batch count, block count, entry count, entry hash, totals)

padded with records of nine-filled lines to a multiple of 10 records (the blocking factor).
The entry hash is the sum of the entries' 8-digit receiving DFI identifications (the routing
number without its check digit), keeping the rightmost 10 digits. Amounts are in cents,
right-aligned and zero-filled: at most 10 digits per entry and 12 per total.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

RECORD_LENGTH: Final = 94
BLOCKING_FACTOR: Final = 10
SERVICE_CLASS_CREDITS: Final = "220"
TRANSACTION_CODE_CHECKING_CREDIT: Final = "22"
SEC_CODES: Final = ("PPD", "CCD")
ENTRIES_MAX: Final = 999_999  # the batch control's six-digit count
ENTRY_AMOUNT_MINOR_MAX: Final = 9_999_999_999
TOTAL_MINOR_MAX: Final = 999_999_999_999
_ENTRY_HASH_MODULUS: Final = 10**10
_PADDING: Final = "9" * RECORD_LENGTH


@dataclass(frozen=True)
class Originator:
    """Who sends the file: the ODFI (the originating bank) and the company."""

    destination_routing: str  # 9 digits: the ACH operator or receiving point
    destination_name: str
    origin_id: str  # 10 characters
    origin_name: str
    company_name: str
    company_id: str  # 10 characters
    odfi_id: str  # 8 digits: the originating bank's routing number without its check digit


@dataclass(frozen=True)
class Entry:
    routing_number: str  # 9 digits, the receiving bank
    account_number: str  # at most 17 characters
    amount_minor: int  # cents
    name: str  # the receiver, at most 22 characters kept
    individual_id: str  # the originator's reference for the entry, at most 15 characters kept


def write_file(
    originator: Originator,
    entries: Sequence[Entry],
    *,
    sec_code: str,
    created_at: dt.datetime,
    effective_date: dt.date,
    description: str = "PAYOUT",
    batch_number: int = 1,
) -> str:
    """The whole file, one record per line (LF)."""
    assert sec_code in SEC_CODES and 1 <= len(entries) <= ENTRIES_MAX
    records = [_file_header(originator, created_at)]
    records.append(_batch_header(originator, sec_code, description, effective_date, batch_number))
    for sequence, entry in enumerate(entries, start=1):
        records.append(_entry_detail(originator, entry, sequence))
    entry_hash = entry_hash_of(entries)
    total_minor = sum(entry.amount_minor for entry in entries)
    records.append(_batch_control(originator, len(entries), entry_hash, total_minor, batch_number))
    blocks = -(-(len(records) + 1) // BLOCKING_FACTOR)
    records.append(_file_control(1, blocks, len(entries), entry_hash, total_minor))
    records.extend([_PADDING] * (blocks * BLOCKING_FACTOR - len(records)))
    assert all(len(record) == RECORD_LENGTH for record in records)
    return "\n".join(records) + "\n"


def entry_hash_of(entries: Sequence[Entry]) -> int:
    return sum(int(entry.routing_number[:8]) for entry in entries) % _ENTRY_HASH_MODULUS


def numeric(value: int, width: int) -> str:
    """Right-aligned, zero-filled; a value that does not fit is a programmer's error."""
    assert type(value) is int and 0 <= value < 10**width, f"{value} does not fit in {width} digits"
    return str(value).zfill(width)


def alpha(value: str, width: int) -> str:
    """Upper-case ASCII, left-aligned, space-filled, cut to `width` (accents are dropped)."""
    ascii_text = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode()
    printable = "".join(char if " " <= char <= "~" else " " for char in ascii_text)
    return printable.upper()[:width].ljust(width)


def _record(*fields: str) -> str:
    record = "".join(fields)
    assert len(record) == RECORD_LENGTH, f"a record of {len(record)} characters"
    return record


def _file_header(originator: Originator, created_at: dt.datetime) -> str:
    return _record(
        "1",
        "01",  # priority code
        " " + _digits(originator.destination_routing, 9),
        alpha(originator.origin_id, 10),
        created_at.strftime("%y%m%d"),
        created_at.strftime("%H%M"),
        "A",  # file id modifier: the first file of the day
        "094",  # record size
        "10",  # blocking factor
        "1",  # format code
        alpha(originator.destination_name, 23),
        alpha(originator.origin_name, 23),
        alpha("", 8),  # reference code
    )


def _batch_header(
    originator: Originator, sec_code: str, description: str, effective_date: dt.date, batch_number: int
) -> str:
    return _record(
        "5",
        SERVICE_CLASS_CREDITS,
        alpha(originator.company_name, 16),
        alpha("", 20),  # company discretionary data
        alpha(originator.company_id, 10),
        sec_code,
        alpha(description, 10),
        alpha("", 6),  # company descriptive date
        effective_date.strftime("%y%m%d"),
        alpha("", 3),  # settlement date: filled in by the ACH operator
        "1",  # originator status code: a depository financial institution
        _digits(originator.odfi_id, 8),
        numeric(batch_number, 7),
    )


def _entry_detail(originator: Originator, entry: Entry, sequence: int) -> str:
    assert 1 <= entry.amount_minor <= ENTRY_AMOUNT_MINOR_MAX
    assert len(entry.account_number) <= 17
    routing = _digits(entry.routing_number, 9)
    return _record(
        "6",
        TRANSACTION_CODE_CHECKING_CREDIT,
        routing[:8],  # receiving DFI identification
        routing[8],  # its check digit
        alpha(entry.account_number, 17),
        numeric(entry.amount_minor, 10),
        alpha(entry.individual_id, 15),
        alpha(entry.name, 22),
        alpha("", 2),  # discretionary data
        "0",  # no addenda record
        _digits(originator.odfi_id, 8) + numeric(sequence, 7),  # trace number
    )


def _batch_control(originator: Originator, count: int, entry_hash: int, total_minor: int, batch_number: int) -> str:
    return _record(
        "8",
        SERVICE_CLASS_CREDITS,
        numeric(count, 6),
        numeric(entry_hash, 10),
        numeric(0, 12),  # total debits
        numeric(total_minor, 12),  # total credits
        alpha(originator.company_id, 10),
        alpha("", 19),  # message authentication code
        alpha("", 6),  # reserved
        _digits(originator.odfi_id, 8),
        numeric(batch_number, 7),
    )


def _file_control(batches: int, blocks: int, count: int, entry_hash: int, total_minor: int) -> str:
    return _record(
        "9",
        numeric(batches, 6),
        numeric(blocks, 6),
        numeric(count, 8),
        numeric(entry_hash, 10),
        numeric(0, 12),  # total debits
        numeric(total_minor, 12),  # total credits
        alpha("", 39),  # reserved
    )


def _digits(value: str, width: int) -> str:
    assert len(value) == width and value.isascii() and value.isdigit(), f"{value!r} is not {width} digits"
    return value
