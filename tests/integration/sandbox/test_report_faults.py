"""The settlement-report faults: each makes exactly the wrong line it promises, decided with
the call that creates the object and applied when the report is written."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from paycore.kit import clock
from paycore.processor.port import ChargeRequest, RefundRequest
from paycore_sandbox import FaultPlanError, Sandbox, SandboxSettings
from paycore_sandbox.limits import REPORT_DELTA_MINOR_MAX
from paycore_sandbox.report_faults import UNKNOWN_REQUEST_ID_PREFIX
from tests.integration.sandbox.bank_support import CLOSE_MS, RETURN_MS, SETTLE_MS, ach, at_ms, install_clock
from tests.integration.sandbox.conftest import Harness

Row = dict[str, str]


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
