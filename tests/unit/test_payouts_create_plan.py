"""A payout's creation, planned (ADR 0026 step 3): pure, so tested without a database. That its
rows are the reference path's, written, is tests/integration/payouts/test_create_data_plane.py's."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paycore.audit.rows import EventContext
from paycore.http.errors import dumps
from paycore.idempotency.service import KeyScope
from paycore.kit.errors import InvalidRequest
from paycore.ledger.limits import Totals
from paycore.payouts import money
from paycore.payouts.create_plan import NewIds, Plan, check_request, in_transit_code, plan_create
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary

IDS = NewIds("po_1", "txn_1", ("acct_a", "acct_b", "acct_c", "acct_d"), "ent_d", "ent_c", "evt_1", "evt_2")
NOW_US = 1_700_000_000_000_000  # 2023-11-14 UTC
SCOPE = KeyScope("acme", "key-1", "f" * 64, now_us=NOW_US, expires_at_us=None)
ACH = Beneficiary("Ada Lovelace", routing_number="110000000", account_number="000123456789")
NEW = NewPayout(1_250, "USD", "acct_src", "ach", ACH, metadata={"b": "2", "a": "1"}, idempotency_key="key-1")


def planned(
    new: NewPayout = NEW, in_transit_id: str | None = None, context: EventContext = EventContext(None, None)
) -> Plan | None:
    return plan_create(
        SCOPE, new, actor="local", in_transit_id=in_transit_id, context=context, new_ids=IDS, encode=dumps
    )


def test_the_payout_is_born_scheduled_today_and_answered_with_its_birth() -> None:
    plan = planned()
    assert plan is not None
    payout = plan.payout
    assert (payout.id, payout.status, payout.amount_minor, payout.transfer_id) == ("po_1", "scheduled", 1_250, "txn_1")
    assert payout.execute_on == "2023-11-14" and payout.attempts == 0 and payout.next_attempt_at_us is None
    assert plan.payout_row["metadata"] == '{"a": "1", "b": "2"}'
    body = json.loads(plan.answer.body)
    assert (plan.answer.status, body["id"], body["status"]) == (201, "po_1", "scheduled")
    assert body["history"] == [
        {"from": None, "to": "scheduled", "cause": "payout_scheduled", "actor": "local", "at": body["created_at"]}
    ]
    assert plan.key_row == SCOPE.row(plan.answer)


def test_the_answer_shows_the_account_numbers_last_four_only() -> None:
    plan = planned()
    assert plan is not None
    assert "000123456789" not in plan.answer.body
    assert json.loads(plan.answer.body)["beneficiary"]["account_number_last4"] == "6789"


def test_the_hold_moves_pending_totals_from_the_source_to_in_transit() -> None:
    plan = planned()
    assert plan is not None
    source, in_transit = plan.entries
    assert (source.id, source.account_id, source.direction) == ("ent_d", "acct_src", "debit")
    assert (in_transit.id, in_transit.direction) == ("ent_c", "credit")
    assert source.delta == Totals(0, 0, 1_250, 0) and in_transit.delta == Totals(0, 0, 0, 1_250)
    assert list(plan.accounts) == money.templates("USD") and not plan.in_transit_known
    assert plan.in_transit.code == in_transit_code("USD") == "payouts.in_transit.USD"
    assert in_transit.account_id == plan.account_ids[list(plan.accounts).index(plan.in_transit)]
    transfer = plan.transfer_row
    assert (transfer["kind"], transfer["owner_id"], transfer["reference_type"]) == ("pending", "po_1", "payout")


def test_a_known_in_transit_account_is_used_as_cached() -> None:
    plan = planned(in_transit_id="acct_cached")
    assert plan is not None and plan.in_transit_known and plan.in_transit_entry.account_id == "acct_cached"


def test_the_source_as_in_transit_is_left_to_the_reference_path() -> None:
    assert planned(in_transit_id="acct_src") is None


def test_the_two_events_the_birth_published_and_the_api_call_not() -> None:
    plan = planned(context=EventContext("req_1", None))
    assert plan is not None
    birth, api_call = plan.event_rows
    assert (birth["type"], birth["object_sequence"], birth["cause"]) == ("payout.scheduled", 1, "payout_scheduled")
    assert json.loads(birth["data"]) == {"execute_on": "2023-11-14", "transfer_id": "txn_1", "request_id": "req_1"}
    assert json.loads(birth["snapshot"])["id"] == "po_1"
    assert (api_call["kind"], api_call["type"], api_call["cause"]) == ("api_call", "api.payouts.schedule", "accepted")
    assert json.loads(api_call["data"]) == {"status": 201, "idempotency_key": "key-1", "request_id": "req_1"}
    assert "snapshot" not in api_call and "object_sequence" not in api_call


@pytest.mark.parametrize(
    "changes",
    [
        {"amount_minor": 0},
        {"amount_minor": 2**53},
        {"currency": "EUR"},
        {"execute_on": "2023-11-13"},
        {"execute_on": "2024-11-14"},
        {"beneficiary": Beneficiary("Ada", routing_number="110000001", account_number="000123456789")},
        {"beneficiary": Beneficiary("Ada", iban="DE89370400440532013000")},
    ],
)
def test_a_request_the_rules_refuse_is_planned_as_nothing(changes: dict[str, object]) -> None:
    new = replace(NEW, **changes)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        check_request(new, NOW_US)  # the rules' one home, which service.schedule calls too
    assert planned(new) is None


def test_a_sepa_beneficiary_is_planned_in_canonical_form() -> None:
    sepa = Beneficiary("Émilie", iban="de89 3704 0044 0532 0130 00", bic="cobadeffxxx")
    plan = planned(replace(NEW, currency="EUR", rail="sepa", beneficiary=sepa))
    assert plan is not None
    assert (plan.payout.iban, plan.payout.bic) == ("DE89370400440532013000", "COBADEFFXXX")
    assert plan.in_transit.code == "payouts.in_transit.EUR"
