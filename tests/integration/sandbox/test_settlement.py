"""The daily settlement CSV: what the processor did that UTC day, fees in integer minor units."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import pytest

from paycore.kit import clock
from paycore.processor.port import ChargeRequest, ProcessorRefused, RefundRequest
from paycore_sandbox import Sandbox, SandboxSettings
from paycore_sandbox.settlement import COLUMNS, fee_minor
from tests.integration.sandbox.conftest import Harness
from tests.support.days import clear_of_midnight


@pytest.fixture(autouse=True)
def _clear_of_midnight() -> None:
    clear_of_midnight()  # the tests here read today's report of what they made (tests/support/days.py)


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def test_the_report_lists_the_days_charges_and_refunds_with_fees(harness: Harness) -> None:
    charged = harness.processor.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"))
    harness.processor.charge(ChargeRequest("pay_2", "merchant_2", 700, "EUR", "tok_declined"))
    harness.processor.refund(RefundRequest("rf_1", "merchant_1", charged.processor_charge_id, 1_000, "USD"))

    lines = list(harness.processor.settlement_report(today()))

    assert all(line.endswith("\r\n") for line in lines)
    assert lines[0] == ",".join(COLUMNS) + "\r\n"
    rows = list(csv.DictReader(lines))
    assert [(row["type"], row["request_id"], row["status"], row["fee_minor"]) for row in rows] == [
        ("charge", "pay_1", "succeeded", "103"),  # (2500 * 29 + 999) // 1000 + 30
        ("charge", "pay_2", "failed", "0"),
        ("refund", "rf_1", "succeeded", "0"),
    ]
    assert rows[0]["processor_id"] == charged.processor_charge_id
    assert (rows[0]["merchant_id"], rows[0]["amount_minor"], rows[0]["currency"]) == ("merchant_1", "2500", "USD")
    assert rows[2]["processor_id"].startswith("re_")
    assert all(row["created_at"].startswith(today()) for row in rows)


def test_another_day_has_the_header_only(harness: Harness) -> None:
    harness.processor.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"))

    assert list(harness.processor.settlement_report("2001-01-01")) == [",".join(COLUMNS) + "\r\n"]


@pytest.mark.parametrize("day", ["2024-02-30", "2024-1-01", "yesterday", "2024-01-01T00:00:00Z"])
def test_a_day_that_is_not_yyyy_mm_dd_is_refused(harness: Harness, day: str) -> None:
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.settlement_report(day)

    assert refused.value.code == "invalid_day"


def test_days_are_utc_and_rows_are_read_in_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 's.db'}", settings=SandboxSettings(report_rows_per_fetch=2))
    midnight_us = clock.parse_rfc3339("2030-06-02T00:00:00Z")
    moments_us = [midnight_us - 1, midnight_us, midnight_us + 1, midnight_us + 2, midnight_us + 86_400_000_000]
    try:
        for index, moment_us in enumerate(moments_us):
            monkeypatch.setattr(clock, "now_us", lambda moment_us=moment_us: moment_us)
            sandbox.charge(ChargeRequest(f"pay_{index}", "merchant_1", 100, "USD", "tok_ok"))

        rows = list(csv.DictReader(sandbox.settlement_report("2030-06-02")))
    finally:
        sandbox.close()

    assert [row["request_id"] for row in rows] == ["pay_1", "pay_2", "pay_3"]
    assert rows[0]["created_at"] == "2030-06-02T00:00:00.000000Z"


@pytest.mark.parametrize(
    ("amount_minor", "fee"),
    [(1, 31), (1_000, 59), (1_001, 60), (2_500, 103), (9_007_199_254_740_991, 261_208_778_387_489 + 30)],
)
def test_fees_are_integer_arithmetic(amount_minor: int, fee: int) -> None:
    assert fee_minor("charge", "succeeded", amount_minor) == fee
    assert fee_minor("charge", "pending", amount_minor) == 0
    assert fee_minor("refund", "succeeded", amount_minor) == 0
