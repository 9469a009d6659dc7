"""The bank rail's HTTP surface: the payout and batch endpoints' JSON, their error codes,
the transport's reading of an answer, and payouts in the settlement CSV."""

from __future__ import annotations

import csv
import dataclasses
import json
from typing import Any

import pytest

from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import PayoutResult, ProcessorUnreachable
from paycore_sandbox import Sandbox
from tests.integration.sandbox.bank_support import (
    CLOSE_MS,
    LATE_RETURN_MS,
    RETURN_MS,
    SETTLE_MS,
    ach,
    at_ms,
    iban_ending,
    install_clock,
    sepa,
)
from tests.integration.sandbox.conftest import Harness, RecordingSink, StartServer
from tests.integration.sandbox.test_http_api import call

RESULT_KEYS = [
    "request_id",
    "status",
    "bank_payout_id",
    "amount_minor",
    "currency",
    "rail",
    "batch_id",
    "fee_minor",
    "failure_code",
    "return_code",
    "return_amount_minor",
    "return_fee_minor",
    "settled_at_us",
    "returned_at_us",
]
BODY = {
    "request_id": "po_1",
    "merchant_id": "merchant_1",
    "amount_minor": 2_500,
    "currency": "USD",
    "rail": "ach",
    "beneficiary_name": "Jane Doe",
    "routing_number": "110000000",
    "account_number": "000123456789",
}


@pytest.fixture
def base_url(sandbox: Sandbox, sink: RecordingSink, serve_sandbox: StartServer) -> str:
    return serve_sandbox(sandbox, sink)


def test_a_payout_is_posted_and_read_back(base_url: str) -> None:
    status, created = call(base_url, "POST", "/v1/payouts", BODY)

    assert status == 200 and list(created) == RESULT_KEYS
    assert (created["status"], created["amount_minor"], created["fee_minor"]) == ("accepted", 2_500, 0)
    assert type(created["amount_minor"]) is int
    assert call(base_url, "GET", "/v1/payouts/po_1") == (200, created)
    assert call(base_url, "POST", "/v1/payouts", BODY) == (200, created), "a repeat answers the original"


def test_payout_errors_are_json_with_a_code(base_url: str) -> None:
    call(base_url, "POST", "/v1/payouts", BODY)

    assert call(base_url, "POST", "/v1/payouts", {**BODY, "amount_minor": 2_501})[1]["error"] == "request_id_reused"
    status, body = call(base_url, "GET", "/v1/payouts/po_unknown")
    assert (status, body["error"]) == (404, "not_found")
    status, body = call(base_url, "GET", "/v1/batches/bb_unknown")
    assert (status, body["error"]) == (404, "not_found")


def with_raw_amount(raw_amount: str) -> bytes:
    body = json.dumps({**BODY, "amount_minor": 0})
    return body.replace('"amount_minor": 0', f'"amount_minor": {raw_amount}').encode()


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (with_raw_amount('"2500"'), 400, "invalid_amount"),
        (with_raw_amount("2500.0"), 400, "invalid_amount"),
        (with_raw_amount("true"), 400, "invalid_amount"),
        (with_raw_amount("null"), 400, "invalid_amount"),
        (json.dumps({**BODY, "surprise": 1}).encode(), 400, "invalid_request"),
        (json.dumps({**BODY, "account_number": "1" * 18}).encode(), 400, "invalid_account"),
        (json.dumps({**BODY, "routing_number": "110000001"}).encode(), 400, "invalid_account"),
        (json.dumps({**BODY, "currency": "EUR"}).encode(), 400, "invalid_currency"),
        (json.dumps({key: value for key, value in BODY.items() if key != "rail"}).encode(), 400, "invalid_request"),
        (b"{not json", 400, "invalid_request"),
    ],
)
def test_bad_payout_bodies_are_refused(base_url: str, raw: bytes, status: int, code: str) -> None:
    answered, body = call(base_url, "POST", "/v1/payouts", raw=raw)

    assert (answered, body["error"]) == (status, code)
    assert call(base_url, "GET", "/v1/payouts/po_1")[0] == 404


def test_a_batch_and_its_payouts(base_url: str, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    install_clock(monkeypatch)
    first = sandbox.send_payout(sepa("po_1"))
    sandbox.send_payout(sepa("po_2", iban_ending("0001"), 7))

    status, batch = call(base_url, "GET", f"/v1/batches/{first.batch_id}")

    assert status == 200
    assert {key: value for key, value in batch.items() if key != "payouts"} == {
        "batch_id": first.batch_id,
        "rail": "sepa",
        "currency": "EUR",
        "status": "open",
        "count": 2,
        "total_minor": 10_007,
        "opened_at": "2030-06-03T12:00:00.000000Z",
        "closes_at": "2030-06-03T12:00:00.500000Z",
        "closed_at": None,
    }
    assert [payout["request_id"] for payout in batch["payouts"]] == ["po_1", "po_2"]
    assert all(list(payout) == RESULT_KEYS for payout in batch["payouts"])
    sandbox.settle_due(at_ms(CLOSE_MS))
    assert call(base_url, "GET", f"/v1/batches/{first.batch_id}")[1]["status"] == "closed"


def test_an_answer_that_does_not_read_as_a_payout_is_unreachable(
    base_url: str, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = HttpTransport(base_url)
    result = transport.send_payout(ach("po_1"))
    broken: list[PayoutResult] = [
        dataclasses.replace(result, amount_minor="2500"),  # type: ignore[arg-type]
        dataclasses.replace(result, fee_minor=True),
        dataclasses.replace(result, status="paid"),  # type: ignore[arg-type]
        dataclasses.replace(result, rail="wire"),  # type: ignore[arg-type]
        dataclasses.replace(result, return_amount_minor="1"),  # type: ignore[arg-type]
    ]
    for answer in broken:
        monkeypatch.setattr(sandbox, "get_payout", lambda _request_id, answer=answer: answer)
        with pytest.raises(ProcessorUnreachable, match="does not read as a payout"):
            transport.get_payout("po_1")


def test_payouts_settled_and_returned_are_in_the_days_settlement_report(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_clock(monkeypatch)
    for request in [
        ach("po_ok", amount_minor=1_000),
        ach("po_rejected", "000111111113"),
        ach("po_returned", "000333333335", 2_000),
        sepa("po_sepa_returned", iban_ending("0003"), 3_000),
        sepa("po_late", iban_ending("0005"), 4_000),
    ]:
        harness.processor.send_payout(request)
    for ms in (SETTLE_MS, RETURN_MS, LATE_RETURN_MS):
        harness.sandbox.settle_due(at_ms(ms))

    rows = list(csv.DictReader(harness.processor.settlement_report("2030-06-03")))

    def line(row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(row[key] for key in ("type", "request_id", "amount_minor", "fee_minor", "status", "code"))

    assert [line(row) for row in rows] == [
        ("payout", "po_late", "4000", "20", "settled", ""),
        ("payout", "po_ok", "1000", "25", "settled", ""),
        ("payout", "po_returned", "2000", "25", "settled", ""),
        ("payout", "po_sepa_returned", "3000", "20", "settled", ""),
        ("payout_return", "po_returned", "2000", "200", "returned", "R02"),
        ("payout_return", "po_sepa_returned", "2900", "500", "returned", "AC04"),
        ("payout_return", "po_late", "4000", "500", "returned", "FOCR"),
    ]
    assert rows[0]["created_at"] == "2030-06-03T12:00:01.500000Z" and rows[-1]["created_at"].startswith("2030-06-03")
    assert all(row["batch_id"].startswith("bb_") and row["processor_id"].startswith("bpo_") for row in rows)
    assert len(list(harness.processor.settlement_report("2030-06-04"))) == 1, "another day: the header only"
