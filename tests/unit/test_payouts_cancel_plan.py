"""A payout's cancel, planned (ADR 0026 step 3): pure, so tested without a database. That its
rows are the reference path's, written, is tests/integration/payouts/test_cancel_data_plane.py's."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paycore.audit.rows import EventContext
from paycore.audit.service import Event
from paycore.http.errors import dumps
from paycore.idempotency.service import KeyScope
from paycore.payouts import states
from paycore.payouts.cancel_plan import NewIds, Plan, plan_cancel, target
from paycore.payouts.create_plan import NewIds as CreateIds
from paycore.payouts.create_plan import plan_create
from paycore.payouts.service import HISTORY_LENGTH_MAX
from paycore.payouts.types import NewPayout, Payout
from paycore.payouts.validation import Beneficiary

NOW_US = 1_700_000_000_000_000  # 2023-11-14 UTC
SCOPE = KeyScope("acme", "cancel-1", "c" * 64, now_us=NOW_US + 50, expires_at_us=NOW_US + 86_400_000_000)
IDS = NewIds("txn_void", "evt_cancel")
ACH = Beneficiary("Ada Lovelace", routing_number="110000000", account_number="000123456789")


def born() -> tuple[Payout, Event]:
    """A scheduled payout and its birth event, as the creating phase plans them."""
    create_ids = CreateIds("po_1", "txn_1", ("acct_a", "acct_b", "acct_c", "acct_d"), "ent_d", "ent_c", "evt_1", "e2")
    new = NewPayout(1_250, "USD", "acct_src", "ach", ACH, idempotency_key="key-1")
    scope = KeyScope("acme", "key-1", "f" * 64, now_us=NOW_US, expires_at_us=None)
    plan = plan_create(
        scope,
        new,
        actor="local",
        in_transit_id=None,
        context=EventContext(None, None),
        new_ids=create_ids,
        encode=dumps,
    )
    assert plan is not None
    row = plan.event_rows[0]
    birth = Event(
        row["id"], row["kind"], row["type"], "payout", "po_1", None, "scheduled", row["cause"], "local", {}, NOW_US
    )
    return plan.payout, birth


def planned(payout: Payout, events: list[Event], scope: KeyScope = SCOPE) -> Plan | None:
    return plan_cancel(
        scope, payout, events, actor="local", context=EventContext(None, None), new_ids=IDS, encode=dumps
    )


def test_a_scheduled_payout_is_canceled_and_answered_with_its_history() -> None:
    payout, birth = born()
    plan = planned(payout, [birth])
    assert plan is not None
    assert (plan.payout.status, plan.payout.updated_at_us) == (states.CANCELED, NOW_US + 50)
    body = json.loads(plan.answer.body)
    assert (plan.answer.status, body["status"]) == (200, "canceled")
    assert [(step["from"], step["to"]) for step in body["history"]] == [(None, "scheduled"), ("scheduled", "canceled")]
    assert plan.key_row == SCOPE.row(plan.answer)
    assert plan.void_row["pending_id"] == "txn_1" and plan.void_row["kind"] == "void"
    assert json.loads(plan.event_row["snapshot"])["status"] == "canceled"


def test_a_change_is_never_recorded_earlier_than_the_payouts_last() -> None:
    payout, birth = born()
    plan = planned(payout, [birth], replace(SCOPE, now_us=NOW_US - 7))  # a clock behind the payout's
    assert plan is not None and plan.now_us == NOW_US + 1 == plan.void_row["created_at_us"]


@pytest.mark.parametrize("status", [s for s in states.STATUSES if s not in states.CANCELABLE])
def test_only_what_the_table_lets_be_canceled_is_planned(status: str) -> None:
    payout, birth = born()
    assert target(status) is None
    assert planned(replace(payout, status=status), [birth]) is None


def test_a_missing_payout_or_a_long_history_is_the_reference_paths() -> None:
    payout, birth = born()
    assert (
        plan_cancel(SCOPE, None, [], actor="local", context=EventContext(None, None), new_ids=IDS, encode=dumps) is None
    )
    assert planned(payout, [birth] * HISTORY_LENGTH_MAX) is None
    assert planned(payout, [birth] * (HISTORY_LENGTH_MAX - 1)) is not None
