"""The daily settlement report: a CSV of what the processor and its bank did on one UTC day.

In time order, one line per:
- charge and refund created that day, with its status at the time the report is read;
- payout settled that day (`payout`, status `settled`, the bank's sending fee);
- payout returned that day (`payout_return`, status `returned`, the amount that came back,
  the return fee and the return code in `code`).
`created_at` is when the line's event happened (creation, settlement, return) and
`batch_id` the bank batch a payout was sent in. Fees are integer minor units: a succeeded
charge costs 2.9% (rounded up) plus 30 minor units; failed and pending charges and every
refund cost 0; payout fees are the bank rail's (SandboxSettings). Rejected payouts moved no
money and cost nothing, so they have no line.

The `report_*` faults of the fault plan (stored per object in `sandbox_report_faults`) make
lines wrong on purpose, as real processors' reports sometimes are: a line left out, an amount
or a fee off by a delta, another status, another currency, a line written twice, an amount
written in major units (`25.00`), an extra charge nobody was told of.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Iterator
from typing import Final

from sqlalchemy import RowMapping

from paycore.db.engine import Database
from paycore.kit import clock
from paycore.kit.money import CURRENCY_EXPONENTS, format_minor, is_known_currency
from paycore.processor.port import SETTLEMENT_REPORT_COLUMNS, ProcessorRefused
from paycore_sandbox import repository

COLUMNS: Final = SETTLEMENT_REPORT_COLUMNS
FEE_PER_MILLE: Final = 29
FEE_FIXED_MINOR: Final = 30
AMOUNT_REPORTED_MINOR_MIN: Final = 1  # report_amount_delta never reports a line of 0 or less
# report_status: what a line reports instead of its status. A pending item is reported
# succeeded (the report runs ahead of the answers); payout lines swap settled and returned.
WRONG_STATUS: Final = {
    "succeeded": "failed",
    "failed": "succeeded",
    "pending": "succeeded",
    "settled": "returned",
    "returned": "settled",
}
# report_currency: the one currency a line reports instead of its own, fixed so that a test
# knows it: euros for dollars, dollars for anything else.
OTHER_CURRENCY: Final = "USD"
OTHER_CURRENCY_OF: Final = {"USD": "EUR"}
_DAY: Final = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")  # [0-9]: \d would match any script's digits
_DAY_US: Final = 86_400 * 1_000_000


def fee_minor(kind: str, status: str, amount_minor: int) -> int:
    assert type(amount_minor) is int and amount_minor > 0
    if kind != "charge" or status != "succeeded":
        return 0
    return (amount_minor * FEE_PER_MILLE + 999) // 1000 + FEE_FIXED_MINOR


def _fee_of(row: RowMapping) -> int:
    if row["fee_minor"] is not None:  # the bank rail's fee, stored with the payout
        fee: int = row["fee_minor"]
        return fee
    return fee_minor(row["type"], row["status"], row["amount_minor"])


def other_currency(currency: str) -> str:
    """What report_currency writes instead of `currency`: always another code."""
    other = OTHER_CURRENCY_OF.get(currency, OTHER_CURRENCY)
    assert other != currency and is_known_currency(other)
    return other


def decimal_amount(amount_minor: int, currency: str) -> str:
    """report_malformed_line: the amount in major units, as a processor that switched from
    minor units would write it (2500 USD: `25.00`; 2500 BHD: `2.500`). A currency without
    minor units (JPY, KRW) gets `.00` too, so that the field is never a whole number."""
    assert type(amount_minor) is int and amount_minor > 0
    if CURRENCY_EXPONENTS[currency] == 0:
        return f"{amount_minor}.00"
    written = format_minor(amount_minor, currency)
    assert "." in written
    return written


def _reported(row: RowMapping) -> tuple[str, int, str, str]:
    """The amount (as written), fee, currency and status the line reports: the true ones,
    changed by the object's report faults. The fee is computed from the true amount and
    status, then moved; a decimal amount is the (moved) amount in the true currency's units."""
    amount, fee, currency, status = row["amount_minor"], _fee_of(row), row["currency"], row["status"]
    if row["amount_delta_minor"] is not None:
        amount = max(AMOUNT_REPORTED_MINOR_MIN, amount + row["amount_delta_minor"])
    if row["fee_delta_minor"] is not None:
        fee = max(0, fee + row["fee_delta_minor"])
    if row["status_wrong"]:
        status = WRONG_STATUS[status]
    assert type(amount) is int and amount >= AMOUNT_REPORTED_MINOR_MIN and type(fee) is int and fee >= 0
    written = decimal_amount(amount, currency) if row["amount_decimal"] else str(amount)
    if row["currency_wrong"]:
        currency = other_currency(currency)
    return written, fee, currency, status


def day_bounds_us(day: str) -> tuple[int, int]:
    """[start, end) of a UTC day in epoch microseconds; ProcessorRefused if `day` is not YYYY-MM-DD."""
    if not isinstance(day, str) or not _DAY.match(day):
        raise ProcessorRefused("invalid_day", f"day must be YYYY-MM-DD, got {day!r}")
    try:
        date = dt.date.fromisoformat(day)
    except ValueError:
        raise ProcessorRefused("invalid_day", f"{day!r} is not a calendar day") from None
    start_us = clock.parse_rfc3339(f"{date.isoformat()}T00:00:00Z")
    return start_us, start_us + _DAY_US


def report_lines(database: Database, day: str, rows_per_fetch: int) -> Iterator[str]:
    """Check `day` now; then a generator of CSV lines (each with its CRLF), header first,
    reading the rows in pages inside one read transaction."""
    start_us, end_us = day_bounds_us(day)
    return _lines(database, start_us, end_us, rows_per_fetch)


def _lines(database: Database, start_us: int, end_us: int, rows_per_fetch: int) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")

    def line(values: tuple[object, ...]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(values)
        return buffer.getvalue()

    yield line(COLUMNS)
    with database.read() as connection:
        for row in repository.settlement_rows(connection, start_us, end_us, rows_per_fetch):
            amount, fee, currency, status = _reported(row)
            yield line(
                (
                    row["type"],
                    row["request_id"],
                    row["processor_id"],
                    row["merchant_id"],
                    amount,
                    fee,
                    currency,
                    status,
                    clock.to_rfc3339(row["at_us"]),
                    row["batch_id"] or "",
                    row["code"] or "",
                )
            )
