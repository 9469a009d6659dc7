"""A ledger transfer's planner (ADR 0026): pure, so tested without a database. Its refusals are
the reference path's own (`postings.check_spec` calls the same `check_entries`)."""

from __future__ import annotations

import json

import pytest

from paycore.idempotency.service import KeyScope
from paycore.ledger.balances import Balance, Totals
from paycore.ledger.errors import AccountNotFound, CurrencyMismatch, SystemAccount, UnbalancedTransfer
from paycore.ledger.schemas import transfer_json
from paycore.ledger.transfer_plan import AccountMove, NewIds, Plan, plan_transfer
from paycore.ledger.types import Account, EntrySpec, Transfer, TransferSpec

NOW_US = 1_700_000_000_000_000
SCOPE = KeyScope("acme", "key-1", "f" * 64, now_us=NOW_US, expires_at_us=None)


def account(account_id: str, normal: str = "credit", *, currency: str = "USD", **flags: bool) -> Account:
    return Account(
        id=account_id,
        code=account_id,
        currency=currency,
        normal_balance=normal,
        no_overdraft=flags.get("no_overdraft", False),
        metadata={},
        created_at_us=0,
        balance=Balance(0, 0, 0),
        system=flags.get("system", False),
    )


ACCOUNTS = {
    "acct_b": account("acct_b", no_overdraft=True),
    "acct_a": account("acct_a"),
    "acct_c": account("acct_c", "debit"),
    "acct_eur": account("acct_eur", currency="EUR"),
    "acct_sys": account("acct_sys", system=True),
}


def render(transfer: Transfer) -> str:
    return json.dumps(transfer_json(transfer), separators=(",", ":"))


def planned(spec: TransferSpec) -> Plan | None:
    ids = NewIds("txn_1", tuple(f"ent_{index}" for index in range(len(spec.entries))))
    return plan_transfer(SCOPE, spec, ACCOUNTS, new_ids=ids, render=render)


def test_the_moves_are_in_id_order_with_their_checks_and_the_answer_takes_the_sequences() -> None:
    spec = TransferSpec(
        (EntrySpec("acct_b", "debit", 10), EntrySpec("acct_b", "debit", 5), EntrySpec("acct_a", "credit", 15)),
        guard_available=("acct_a",),
    )
    plan = planned(spec)
    assert plan is not None
    assert plan.moves == (
        AccountMove("acct_a", Totals(0, 15, 0, 0), 1, "credit", True),  # guarded by the spec
        AccountMove("acct_b", Totals(15, 0, 0, 0), 2, "credit", True),  # flagged no_overdraft
    )
    assert [row["id"] for row in plan.entry_rows] == ["ent_0", "ent_1", "ent_2"]
    sequences = plan.sequences({"acct_a": 7, "acct_b": 3})
    assert sequences == [2, 3, 7]  # acct_b's entries were its 2nd and 3rd, acct_a's its 7th
    answer = plan.answer(sequences)
    body = json.loads(answer.body)
    assert answer.status == 201 and [entry["account_sequence"] for entry in body["entries"]] == sequences
    assert (body["id"], body["amount_minor"], body["created_at"][:4]) == ("txn_1", 15, "2023")


def test_a_hold_moves_pending_totals() -> None:
    spec = TransferSpec((EntrySpec("acct_c", "debit", 9), EntrySpec("acct_a", "credit", 9)), pending=True)
    plan = planned(spec)
    assert plan is not None
    assert [(move.account_id, move.delta) for move in plan.moves] == [
        ("acct_a", Totals(0, 0, 0, 9)),
        ("acct_c", Totals(0, 0, 9, 0)),
    ]
    assert plan.transfer_row["kind"] == "pending"


@pytest.mark.parametrize(
    ("entries", "currency", "refusal"),
    [
        ((EntrySpec("acct_a", "debit", 2), EntrySpec("acct_b", "credit", 1)), None, UnbalancedTransfer),
        ((EntrySpec("acct_a", "debit", 1), EntrySpec("acct_eur", "credit", 1)), "USD", CurrencyMismatch),
        ((EntrySpec("acct_a", "debit", 1), EntrySpec("acct_none", "credit", 1)), None, AccountNotFound),
        ((EntrySpec("acct_sys", "debit", 1), EntrySpec("acct_a", "credit", 1)), None, SystemAccount),
    ],
)
def test_a_request_the_reference_path_refuses_is_refused_alike(
    entries: tuple[EntrySpec, ...], currency: str | None, refusal: type[Exception]
) -> None:
    with pytest.raises(refusal):
        planned(TransferSpec(entries, currency=currency))


def test_a_renderer_without_the_sequence_slots_is_left_to_the_reference_path() -> None:
    spec = TransferSpec((EntrySpec("acct_a", "debit", 1), EntrySpec("acct_b", "credit", 1)))
    ids = NewIds("txn_1", ("ent_0", "ent_1"))
    assert plan_transfer(SCOPE, spec, ACCOUNTS, new_ids=ids, render=lambda transfer: "{}") is None
