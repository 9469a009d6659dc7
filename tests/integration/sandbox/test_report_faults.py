"""The settlement-report faults: each makes exactly the wrong line it promises, decided with
the call that creates the object and applied when the report is written."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from paycore.kit import clock
from paycore.processor.port import ChargeRequest, RefundRequest
from paycore_sandbox import FaultPlanError, Sandbox, SandboxSettings
from paycore_sandbox.limits import REPORT_DELTA_MINOR_MAX
from paycore_sandbox.report_faults import UNKNOWN_REQUEST_ID_PREFIX
from paycore_sandbox.service import SandboxSchemaOutdated
from tests.integration.sandbox.bank_support import CLOSE_MS, RETURN_MS, SETTLE_MS, ach, at_ms, install_clock, sepa
from tests.integration.sandbox.conftest import Harness
from tests.support.days import clear_of_midnight

Row = dict[str, str]


@pytest.fixture(autouse=True)
def _clear_of_midnight() -> None:
    clear_of_midnight()  # the tests here read today's report of what they made (tests/support/days.py)


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def plan(*rules: dict[str, object]) -> dict[str, object]:
    return {"seed": 7, "rules": list(rules)}


def report(sandbox: Sandbox, day: str | None = None) -> list[Row]:
    return list(csv.DictReader(sandbox.settlement_report(day or today())))


def by_request_id(rows: list[Row]) -> dict[str, Row]:
    return {row["request_id"]: row for row in rows}


def make_day(sandbox: Sandbox) -> None:
    """A succeeded charge (pay_1), a failed one (pay_2), a refund of the first (rf_1) and a
    succeeded charge that no fault touches (pay_3)."""
    charged = sandbox.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"), sandbox.decide("charge"))
    sandbox.charge(ChargeRequest("pay_2", "merchant_1", 700, "USD", "tok_declined"), sandbox.decide("charge"))
    refund = RefundRequest("rf_1", "merchant_1", charged.processor_charge_id, 1_000, "USD")
    sandbox.refund(refund, sandbox.decide("refund"))
    sandbox.clear_fault_plan()
    sandbox.charge(ChargeRequest("pay_3", "merchant_1", 900, "USD", "tok_ok"))


@pytest.fixture
def right(tmp_path: Path) -> list[Row]:
    """The report of make_day's calls without any fault: what the faulty reports differ from."""
    clean = Sandbox.open(f"sqlite:///{tmp_path / 'clean.db'}")
    try:
        make_day(clean)
        return report(clean)
    finally:
        clean.close()


def assert_differs_only(faulty: list[Row], right: list[Row], changed: dict[str, dict[str, str]]) -> None:
    """`faulty` is `right` with the fields of `changed` (request id -> column -> value) changed;
    processor ids and times differ between the two sandboxes and are compared by shape."""
    assert [row["request_id"] for row in faulty] == [row["request_id"] for row in right]
    for wrong, true in zip(faulty, right, strict=True):
        ignore = {"processor_id", "created_at"}
        expected = {**true, **changed.get(true["request_id"], {})}
        assert {key: wrong[key] for key in wrong if key not in ignore} == {
            key: expected[key] for key in expected if key not in ignore
        }


def test_report_drop_line_leaves_the_objects_line_out(sandbox: Sandbox, right: list[Row]) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_drop_line", "next_n": 1, "ops": ["refund"]}))
    make_day(sandbox)

    faulty = report(sandbox)

    assert_differs_only(faulty, [row for row in right if row["request_id"] != "rf_1"], {})
    assert sandbox.get_refund("rf_1") is not None and sandbox.get_refund("rf_1").status == "succeeded"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("delta_minor", "reported"),
    [(7, "2507"), (-500, "2000"), (-2_499, "1"), (-REPORT_DELTA_MINOR_MAX, "1")],  # never below 1
)
def test_report_amount_delta_moves_the_amount_and_nothing_else(
    sandbox: Sandbox, right: list[Row], delta_minor: int, reported: str
) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_amount_delta", "amount_delta_minor": delta_minor, "next_n": 1}))
    make_day(sandbox)

    assert_differs_only(report(sandbox), right, {"pay_1": {"amount_minor": reported}})  # the fee stays 103


@pytest.mark.parametrize(("delta_minor", "reported"), [(5, "108"), (-3, "100"), (-1_000, "0")])  # never below 0
def test_report_fee_delta_moves_the_fee_and_nothing_else(
    sandbox: Sandbox, right: list[Row], delta_minor: int, reported: str
) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_fee_delta", "fee_delta_minor": delta_minor, "next_n": 1}))
    make_day(sandbox)

    assert_differs_only(report(sandbox), right, {"pay_1": {"fee_minor": reported}})


def test_report_status_swaps_succeeded_and_failed(sandbox: Sandbox, right: list[Row]) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_status", "percent": 100, "ops": ["charge"]}))
    make_day(sandbox)

    faulty = report(sandbox)

    # The fee is the true one: the report says failed but charges the succeeded charge's fee.
    assert_differs_only(faulty, right, {"pay_1": {"status": "failed"}, "pay_2": {"status": "succeeded"}})
    assert sandbox.get_charge("pay_1").status == "succeeded"  # type: ignore[union-attr]


def test_report_status_reports_a_pending_item_succeeded(sandbox: Sandbox) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_status", "next_n": 1}))
    sandbox.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_pending"), sandbox.decide("charge"))

    (line,) = report(sandbox)

    assert (line["status"], line["fee_minor"]) == ("succeeded", "0")
    assert sandbox.get_charge("pay_1").status == "pending"  # type: ignore[union-attr]


def test_report_unknown_charge_adds_a_charge_nobody_was_told_of(sandbox: Sandbox, right: list[Row]) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_unknown_charge", "next_n": 1, "ops": ["charge"]}))
    make_day(sandbox)

    faulty = report(sandbox)

    unknown = [row for row in faulty if row["request_id"].startswith(UNKNOWN_REQUEST_ID_PREFIX)]
    assert len(unknown) == 1
    assert_differs_only([row for row in faulty if row not in unknown], right, {})
    (line,) = unknown
    charged = by_request_id(faulty)["pay_1"]
    assert line["processor_id"].startswith("ch_") and line["processor_id"] != charged["processor_id"]
    same = ("type", "merchant_id", "amount_minor", "fee_minor", "currency", "status", "created_at", "batch_id", "code")
    assert {key: line[key] for key in same} == {key: charged[key] for key in same}
    assert sandbox.get_charge(line["request_id"]) is None, "the sandbox never answered anyone about it"


@pytest.mark.parametrize(("currency", "reported"), [("USD", "EUR"), ("EUR", "USD"), ("JPY", "USD"), ("BHD", "USD")])
def test_report_currency_reports_the_fixed_other_currency(sandbox: Sandbox, currency: str, reported: str) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_currency", "next_n": 1, "ops": ["charge"]}))
    sandbox.charge(ChargeRequest("pay_1", "merchant_1", 2_500, currency, "tok_ok"), sandbox.decide("charge"))

    (line,) = report(sandbox)

    assert (line["amount_minor"], line["fee_minor"], line["currency"]) == ("2500", "103", reported)
    assert sandbox.get_charge("pay_1").currency == currency  # type: ignore[union-attr]


def test_report_currency_changes_the_currency_and_nothing_else(sandbox: Sandbox, right: list[Row]) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_currency", "next_n": 1, "ops": ["refund"]}))
    make_day(sandbox)

    assert_differs_only(report(sandbox), right, {"rf_1": {"currency": "EUR"}})


def test_report_duplicate_line_writes_the_line_twice_in_a_row(sandbox: Sandbox, right: list[Row]) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_duplicate_line", "next_n": 1, "ops": ["charge"]}))
    make_day(sandbox)

    faulty = report(sandbox)

    assert [row["request_id"] for row in faulty] == ["pay_1", "pay_1", "pay_2", "rf_1", "pay_3"]
    assert faulty[0] == faulty[1], "the same fields, processor id and time included"
    assert_differs_only(faulty[1:], right, {})


def test_report_duplicate_line_duplicates_the_line_as_the_other_faults_made_it(sandbox: Sandbox) -> None:
    sandbox.set_fault_plan(
        plan(
            {"fault": "report_duplicate_line", "percent": 100, "ops": ["charge"]},
            {"fault": "report_amount_delta", "amount_delta_minor": -1, "next_n": 1, "ops": ["charge"]},
            {"fault": "report_unknown_charge", "next_n": 1, "ops": ["charge"]},
            {"fault": "report_drop_line", "next_n": 2, "ops": ["charge"]},
            {"fault": "report_malformed_line", "next_n": 3, "ops": ["charge"]},
        )
    )
    for number in (1, 2, 3):  # pay_1 and pay_2 are dropped too: a dropped line is not written at all
        sandbox.charge(ChargeRequest(f"pay_{number}", "merchant_1", 1_000, "USD", "tok_ok"), sandbox.decide("charge"))

    lines = [(row["request_id"][:4], row["amount_minor"]) for row in report(sandbox)]

    # pay_1's unknown charge is a line of its own (the call's amount), not duplicated; pay_3
    # twice, as a decimal both times
    assert lines == [("unkn", "1000"), ("pay_", "10.00"), ("pay_", "10.00")]


@pytest.mark.parametrize(
    ("amount_minor", "currency", "written"),
    [
        (2_500, "USD", "25.00"),
        (5, "USD", "0.05"),
        (123_456, "EUR", "1234.56"),
        (2_500, "BHD", "2.500"),  # three decimals
        (2_500, "JPY", "2500.00"),  # no minor unit: still a decimal, never a whole number
    ],
)
def test_report_malformed_line_writes_the_amount_in_major_units(
    sandbox: Sandbox, amount_minor: int, currency: str, written: str
) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_malformed_line", "next_n": 1, "ops": ["charge"]}))
    charged = sandbox.charge(ChargeRequest("pay_1", "m_1", amount_minor, currency, "tok_ok"), sandbox.decide("charge"))

    raw = list(sandbox.settlement_report(today()))

    assert raw[1].split(",")[4:7] == [written, str((amount_minor * 29 + 999) // 1000 + 30), currency]
    assert raw[1].startswith(f"charge,pay_1,{charged.processor_charge_id},m_1,{written},") and raw[1].endswith(",,\r\n")


def test_report_malformed_line_changes_the_amount_and_nothing_else(sandbox: Sandbox, right: list[Row]) -> None:
    sandbox.set_fault_plan(plan({"fault": "report_malformed_line", "next_n": 1, "ops": ["refund"]}))
    make_day(sandbox)

    assert_differs_only(report(sandbox), right, {"rf_1": {"amount_minor": "10.00"}})


def test_faults_combine_on_one_line(sandbox: Sandbox) -> None:
    sandbox.set_fault_plan(
        plan(
            {"fault": "report_amount_delta", "amount_delta_minor": 100, "next_n": 1},
            {"fault": "report_fee_delta", "fee_delta_minor": -3, "next_n": 1},
            {"fault": "report_status", "next_n": 1},
        )
    )
    sandbox.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"), sandbox.decide("charge"))

    (line,) = report(sandbox)

    assert (line["amount_minor"], line["fee_minor"], line["status"]) == ("2600", "100", "failed")


def test_a_replayed_request_records_no_second_fault(sandbox: Sandbox) -> None:
    request = ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok")
    sandbox.charge(request)
    sandbox.set_fault_plan(plan({"fault": "report_unknown_charge", "percent": 100, "ops": ["charge"]}))

    sandbox.charge(request, sandbox.decide("charge"))  # the stored answer: nothing is created

    assert [row["request_id"] for row in report(sandbox)] == ["pay_1"]


def test_payout_lines_carry_the_payouts_faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_clock(monkeypatch).at_ms(0)
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 's.db'}", settings=SandboxSettings())
    try:
        sandbox.set_fault_plan(
            plan(
                {"fault": "report_status", "next_n": 1, "ops": ["payout"]},
                {"fault": "report_drop_line", "next_n": 1, "ops": ["payout"]},
            )
        )
        sandbox.send_payout(ach("po_returned", "000333333335", amount_minor=2_000), sandbox.decide("payout"))
        sandbox.set_fault_plan(plan({"fault": "report_status", "next_n": 1, "ops": ["payout"]}))
        sandbox.send_payout(ach("po_returned_too", "000333333335", amount_minor=3_000), sandbox.decide("payout"))
        sandbox.send_payout(ach("po_settled", amount_minor=4_000), sandbox.decide("payout"))
        for step_ms in (CLOSE_MS, SETTLE_MS, RETURN_MS):
            sandbox.settle_due(at_ms(step_ms))

        rows = report(sandbox, "2030-06-03")
    finally:
        sandbox.close()

    assert [(row["type"], row["request_id"], row["status"]) for row in rows] == [
        ("payout", "po_returned_too", "returned"),  # settled, reported returned
        ("payout", "po_settled", "settled"),
        ("payout_return", "po_returned_too", "settled"),  # returned, reported settled
    ]


def test_payout_lines_carry_the_new_faults_on_both_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_clock(monkeypatch).at_ms(0)
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 's.db'}", settings=SandboxSettings())
    try:
        sandbox.set_fault_plan(
            plan(
                {"fault": "report_currency", "next_n": 1, "ops": ["payout"]},
                {"fault": "report_duplicate_line", "next_n": 1, "ops": ["payout"]},
                {"fault": "report_malformed_line", "next_n": 2, "ops": ["payout"]},
            )
        )
        sandbox.send_payout(ach("po_ach", "000333333335", amount_minor=2_000), sandbox.decide("payout"))
        sandbox.send_payout(sepa("po_sepa", amount_minor=3_000), sandbox.decide("payout"))
        for step_ms in (CLOSE_MS, SETTLE_MS, RETURN_MS):
            sandbox.settle_due(at_ms(step_ms))

        rows = report(sandbox, "2030-06-03")
    finally:
        sandbox.close()

    assert [(row["type"], row["request_id"], row["amount_minor"], row["currency"]) for row in rows] == [
        ("payout", "po_ach", "20.00", "EUR"),
        ("payout", "po_ach", "20.00", "EUR"),
        ("payout", "po_sepa", "30.00", "EUR"),
        ("payout_return", "po_ach", "20.00", "EUR"),
        ("payout_return", "po_ach", "20.00", "EUR"),
    ]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"fault": "report_amount_delta", "next_n": 1, "amount_delta_minor": 0}, "must not be 0"),
        ({"fault": "report_fee_delta", "next_n": 1, "fee_delta_minor": 0}, "must not be 0"),
        ({"fault": "report_amount_delta", "next_n": 1}, "'amount_delta_minor' is required"),
        ({"fault": "report_fee_delta", "next_n": 1}, "'fee_delta_minor' is required"),
        ({"fault": "report_status", "next_n": 1, "fee_delta_minor": 5}, "'fee_delta_minor' is required"),
        ({"fault": "report_fee_delta", "next_n": 1, "amount_delta_minor": 5}, "'amount_delta_minor' is required"),
        ({"fault": "report_amount_delta", "next_n": 1, "amount_delta_minor": REPORT_DELTA_MINOR_MAX + 1}, "amount"),
        ({"fault": "report_fee_delta", "next_n": 1, "fee_delta_minor": -REPORT_DELTA_MINOR_MAX - 1}, "fee_delta"),
        ({"fault": "report_amount_delta", "next_n": 1, "amount_delta_minor": 1.5}, "amount_delta_minor"),
        ({"fault": "report_amount_delta", "next_n": 1, "amount_delta_minor": "5"}, "amount_delta_minor"),
        ({"fault": "report_unknown_charge", "next_n": 1, "ops": ["refund"]}, "'charge' only"),
        ({"fault": "report_unknown_charge", "next_n": 1, "ops": ["charge", "payout"]}, "'charge' only"),
        ({"fault": "report_unknown_charge", "next_n": 1}, "'charge' only"),  # the default ops name refund
        ({"fault": "report_drop_line", "next_n": 1, "ops": ["get_charge"]}, "charge' and 'refund' only"),
        ({"fault": "report_currency", "next_n": 1, "ops": ["get_refund"]}, "charge' and 'refund' only"),
        ({"fault": "report_duplicate_line", "next_n": 1, "ops": ["charge", "get_payout"]}, "'refund' only"),
        ({"fault": "report_malformed_line", "next_n": 1, "amount_delta_minor": 5}, "'amount_delta_minor' is required"),
        ({"fault": "report_currency", "next_n": 1, "currency": "EUR"}, "currency: Extra inputs are not permitted"),
        ({"fault": "report_duplicate_lines", "next_n": 1}, "fault: Input should be"),
    ],
)
def test_bad_report_rules_are_refused_with_a_clear_message(
    sandbox: Sandbox, rule: dict[str, Any], message: str
) -> None:
    with pytest.raises(FaultPlanError) as refused:
        sandbox.set_fault_plan(plan(rule))

    assert message in str(refused.value)


def test_through_http_the_csv_carries_the_faults(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(
        plan(
            {"fault": "report_amount_delta", "amount_delta_minor": -1, "next_n": 1, "ops": ["charge"]},
            {"fault": "report_unknown_charge", "next_n": 1, "ops": ["charge"]},
        )
    )
    harness.processor.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"))
    harness.processor.charge(ChargeRequest("pay_2", "merchant_1", 800, "USD", "tok_ok"))

    rows = list(csv.DictReader(harness.processor.settlement_report(today())))

    lines = sorted((row["request_id"][: len(UNKNOWN_REQUEST_ID_PREFIX)], row["amount_minor"]) for row in rows)
    assert lines == [("pay_1", "2499"), ("pay_2", "800"), (UNKNOWN_REQUEST_ID_PREFIX, "2500")]


def test_through_http_the_csv_carries_the_new_faults(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(
        plan(
            {"fault": "report_currency", "next_n": 1, "ops": ["charge"]},
            {"fault": "report_duplicate_line", "next_n": 1, "ops": ["charge"]},
            {"fault": "report_malformed_line", "next_n": 1, "ops": ["charge"]},
        )
    )
    harness.processor.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"))

    raw = list(harness.processor.settlement_report(today()))

    assert len(raw) == 3 and raw[1] == raw[2]
    fields = raw[1].split(",")
    assert (fields[:2], fields[3:8]) == (["charge", "pay_1"], ["merchant_1", "25.00", "103", "EUR", "succeeded"])


def test_without_faults_the_report_is_what_it_was(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock, "now_us", lambda: clock.parse_rfc3339("2030-06-02T10:00:00.000001Z"))
    sandbox.set_fault_plan(plan({"fault": "report_drop_line", "percent": 0}, {"fault": "error_500", "percent": 0}))
    charged = sandbox.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"), sandbox.decide("charge"))
    refund = RefundRequest("rf_1", "merchant_1", charged.processor_charge_id, 1_000, "USD")
    refunded = sandbox.refund(refund, sandbox.decide("refund"))

    assert "".join(sandbox.settlement_report("2030-06-02")) == (
        "type,request_id,processor_id,merchant_id,amount_minor,fee_minor,currency,status,created_at,batch_id,code\r\n"
        f"charge,pay_1,{charged.processor_charge_id},merchant_1,2500,103,USD,succeeded,2030-06-02T10:00:00.000001Z,,\r\n"
        f"refund,rf_1,{refunded.processor_refund_id},merchant_1,1000,0,USD,succeeded,2030-06-02T10:00:00.000001Z,,\r\n"
    )


def test_a_sandbox_database_from_before_the_report_faults_gets_their_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = Sandbox.open(url)
    old.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"))
    with old.database.engine.begin() as connection:
        connection.execute(text("DROP TABLE sandbox_report_faults"))
    old.close()

    reopened = Sandbox.open(url)
    try:
        reopened.set_fault_plan(plan({"fault": "report_drop_line", "next_n": 1}))
        reopened.charge(ChargeRequest("pay_2", "merchant_1", 700, "USD", "tok_ok"), reopened.decide("charge"))
        assert [row["request_id"] for row in report(reopened)] == ["pay_1"]
    finally:
        reopened.close()


OLD_REPORT_FAULTS_TABLE = """CREATE TABLE sandbox_report_faults (
    kind VARCHAR(8) NOT NULL, request_id VARCHAR(255) NOT NULL, fault VARCHAR(32) NOT NULL,
    value_minor BIGINT, unknown_request_id VARCHAR(64), unknown_processor_id VARCHAR(64),
    CONSTRAINT pk_sandbox_report_faults PRIMARY KEY (kind, request_id, fault),
    CONSTRAINT ck_sandbox_report_faults_fault CHECK (fault IN ('report_drop_line', 'report_amount_delta',
        'report_fee_delta', 'report_status', 'report_unknown_charge')))"""


def test_a_sandbox_database_whose_report_faults_table_predates_the_new_faults_is_refused(database_url: str) -> None:
    """`create_all` leaves an existing table as it is, and its CHECK would refuse the new
    faults' rows mid-call (a 500): the sandbox has no migrations, so it says so at open."""
    Sandbox.open(database_url).close()
    Sandbox.open(database_url).close()  # a database made by this version opens again
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE sandbox_report_faults"))
        connection.execute(text(OLD_REPORT_FAULTS_TABLE))
    engine.dispose()

    with pytest.raises(SandboxSchemaOutdated) as refused:
        Sandbox.open(database_url)

    message = str(refused.value)
    assert "report_currency, report_duplicate_line, report_malformed_line" in message and "delete it" in message


def test_the_faults_are_joined_on_both_backends(sandbox_on_backend: Sandbox) -> None:
    sandbox = sandbox_on_backend
    sandbox.set_fault_plan(
        plan(
            {"fault": "report_drop_line", "next_n": 1, "ops": ["charge"]},
            {"fault": "report_unknown_charge", "next_n": 1, "ops": ["charge"]},
            {"fault": "report_fee_delta", "fee_delta_minor": 1, "percent": 100, "ops": ["charge"]},
            {"fault": "report_status", "percent": 100, "ops": ["charge"]},
        )
    )
    sandbox.charge(ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok"), sandbox.decide("charge"))
    sandbox.charge(ChargeRequest("pay_2", "merchant_1", 1_000, "USD", "tok_ok"), sandbox.decide("charge"))

    rows = report(sandbox)

    # pay_1's line is dropped; its unknown charge has no faults of its own (fee 103, succeeded)
    lines = sorted((row["request_id"][:4], row["amount_minor"], row["fee_minor"], row["status"]) for row in rows)
    assert lines == [("pay_", "1000", "60", "failed"), ("unkn", "2500", "103", "succeeded")]


def test_the_new_faults_are_joined_on_both_backends(sandbox_on_backend: Sandbox) -> None:
    sandbox = sandbox_on_backend
    sandbox.set_fault_plan(
        plan(
            {"fault": "report_duplicate_line", "next_n": 2, "ops": ["charge"]},
            {"fault": "report_currency", "next_n": 1, "ops": ["charge"]},
            {"fault": "report_malformed_line", "percent": 100, "ops": ["charge"]},
        )
    )
    for number, amount_minor in ((1, 2_500), (2, 1_000), (3, 700)):
        request = ChargeRequest(f"pay_{number}", "merchant_1", amount_minor, "USD", "tok_ok")
        sandbox.charge(request, sandbox.decide("charge"))

    rows = report(sandbox)

    assert [(row["request_id"], row["amount_minor"], row["currency"]) for row in rows] == [
        ("pay_1", "25.00", "EUR"),
        ("pay_1", "25.00", "EUR"),
        ("pay_2", "10.00", "USD"),
        ("pay_2", "10.00", "USD"),
        ("pay_3", "7.00", "USD"),
    ]
