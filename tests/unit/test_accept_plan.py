"""A payment's accept, planned (ADR 0026 step 3): pure, so tested without a database. That its
rows are the reference path's, written, is tests/integration/payments/test_accept_data_plane.py's."""

from __future__ import annotations

import json

from paycore.audit.rows import EventContext
from paycore.idempotency.service import KeyScope
from paycore.kit import actors
from paycore.ledger.limits import Totals
from paycore.payments.accept_plan import NewIds, Plan, clearing_template, plan_accept
from paycore.payments.types import NewPayment

IDS = NewIds("pay_1", "txn_1", "acct_new", "ent_d", "ent_c", "evt_1")
NOW_US = 1_700_000_000_000_000
STALE_MS = 60_000
SCOPE = KeyScope("acme", "key-1", "f" * 64, now_us=NOW_US, expires_at_us=None)
NEW = NewPayment(1_250, "USD", "card", "tok_ok", "acct_dest", None, {"b": "2", "a": "1"}, actors.LOCAL)


def planned(clearing_id: str | None = None, context: EventContext = EventContext(None, None)) -> Plan | None:
    return plan_accept(
        SCOPE, NEW, processing_stale_ms=STALE_MS, clearing_account_id=clearing_id, context=context, new_ids=IDS
    )


def test_the_payment_is_born_processing_and_due_to_the_resolver() -> None:
    plan = planned()
    assert plan is not None
    payment = plan.payment
    assert (payment.id, payment.status, payment.amount_minor, payment.transfer_id) == (
        "pay_1",
        "processing",
        1_250,
        "txn_1",
    )
    assert payment.processor_request_id == payment.id
    assert payment.next_attempt_at_us == NOW_US + STALE_MS * 1_000
    assert plan.payment_row["metadata"] == '{"a": "1", "b": "2"}'
    assert plan.key_row == SCOPE.row(None)


def test_the_hold_moves_pending_totals_from_clearing_to_the_destination() -> None:
    plan = planned()
    assert plan is not None
    clearing, destination = plan.entries
    assert (clearing.id, clearing.account_id, clearing.direction) == ("ent_d", "acct_new", "debit")
    assert (destination.id, destination.account_id, destination.direction) == ("ent_c", "acct_dest", "credit")
    assert clearing.delta == Totals(0, 0, 1_250, 0) and destination.delta == Totals(0, 0, 0, 1_250)
    assert plan.clearing == clearing_template("USD") and not plan.clearing_known
    transfer = plan.transfer_row
    assert (transfer["kind"], transfer["owner_id"], transfer["reference_type"]) == ("pending", "pay_1", "payment")


def test_a_known_clearing_account_is_used_as_cached() -> None:
    plan = planned("acct_cached")
    assert plan is not None and plan.clearing_known and plan.clearing_entry.account_id == "acct_cached"


def test_the_birth_event_is_published_first_and_names_the_request() -> None:
    plan = planned(context=EventContext("req_1", None))
    assert plan is not None
    event = plan.event_row
    assert (event["id"], event["type"], event["object_sequence"], event["cause"]) == (
        "evt_1",
        "payment.processing",
        1,
        "api_request",
    )
    assert json.loads(event["data"]) == {"request_id": "req_1"}
    assert json.loads(event["snapshot"])["id"] == "pay_1"


def test_the_clearing_account_as_destination_is_left_to_the_reference_path() -> None:
    assert planned(clearing_id="acct_dest") is None
